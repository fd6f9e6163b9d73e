"""verify-contract re-observes what a caller supplied (issue 10, item 7).

An agent can pass any environment to ``continuum_resume(env=...)``: a changed file's old
checksum makes its own contract say "resume" while ``continuum resume`` says
``repair_and_resume``. The contract now records which values were supplied, and
``verify-contract`` re-observes every supplied value that a provider can observe.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from continuum.runtime.facade import Continuum
from continuum.state.environment import file_checksum
from continuum.store import open_store
from continuum.types import Origin
from tests.cli.conftest import Result

RUN = "r1"


def prepare(cli: Callable[..., Result], tmp_path: Path) -> tuple[Path, str]:
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n", encoding="utf-8")
    assert cli("start", RUN, "--goal", "analyze data.csv").code == 0
    assert cli("declare", RUN, "--file", str(data)).code == 0
    old = file_checksum(data)
    assert old is not None
    return data, old


def agent_contract(db: str, env: dict[str, str], out: Path) -> dict[str, Any]:
    agent = Continuum(open_store(db), origin=Origin.EXTERNAL_AGENT)
    try:
        contract = agent.resume(RUN, env=env).contract
    finally:
        agent.close()
    assert contract is not None
    out.write_text(json.dumps(contract), encoding="utf-8")
    return contract


def test_a_contract_built_on_a_supplied_stale_checksum_is_refused(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    data, old = prepare(cli, tmp_path)
    data.write_text("a,b\n1,3\n", encoding="utf-8")  # the dataset changed
    name = f"file:{data}"
    forged = agent_contract(db, {name: old}, tmp_path / "contract.json")
    assert forged["evidence"]["environment_sources"] == {name: "supplied"}
    truth = cli("--json", "resume", RUN)
    assert truth.json()["mode"] == "repair_and_resume"
    assert forged["verdict"] != "repair_and_resume"  # what the agent's own answer said

    r = cli("--json", "verify-contract", str(tmp_path / "contract.json"))

    assert r.code == 3
    assert r.json()["error"]["code"] == "integrity.contract_mismatch"


def test_a_supplied_value_that_is_true_is_reobserved_and_accepted(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    data, old = prepare(cli, tmp_path)
    agent_contract(db, {f"file:{data}": old}, tmp_path / "contract.json")

    r = cli("--json", "verify-contract", str(tmp_path / "contract.json"))

    assert r.code == 0, r.out
    assert r.json()["reobserved"] == [f"file:{data}"]
    assert r.json()["unverified_inputs"] == []


def test_a_value_nothing_can_observe_is_accepted_but_named_as_taken_on_trust(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    assert cli("start", RUN, "--goal", "g").code == 0
    assert cli("declare", RUN, "--env", "dataset=v1").code == 0
    agent_contract(db, {"dataset": "v1"}, tmp_path / "contract.json")

    r = cli("--json", "verify-contract", str(tmp_path / "contract.json"))

    assert r.code == 0, r.out
    assert r.json()["unverified_inputs"] == ["dataset"]


def test_an_observed_value_is_observed_again(
    cli: Callable[..., Result], db: str, tmp_path: Path
) -> None:
    data, _ = prepare(cli, tmp_path)
    contract = agent_contract(db, {}, tmp_path / "contract.json")
    assert contract["evidence"]["environment_sources"] == {f"file:{data}": "observed"}
    assert cli("--json", "verify-contract", str(tmp_path / "contract.json")).code == 0
    data.write_text("changed\n", encoding="utf-8")
    assert cli("--json", "verify-contract", str(tmp_path / "contract.json")).code == 3
