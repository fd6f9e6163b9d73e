"""Delivering the outbox from inside the long-running servers (issue 26).

``continuum-mcp`` (both transports), ``continuum ui`` and the gateways run
``delivering`` around their serving: while a webhook is configured, a daemon thread takes
the store's one deliverer role across processes (``Storage.deliverer_lock``) and delivers
with ``outbox.deliver_loop`` (the command's claims, compare-and-set, retries and
backoff); after each pass it runs the server's ``watch`` (the verdict watch of
``runtime/verdicts.py``). The others stand by and take the role over when it goes.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from continuum.errors import ContinuumError
from continuum.log import get_logger
from continuum.store import Storage

if TYPE_CHECKING:  # the outbox (with its HTTP client) loads in the deliverer's thread
    from continuum.ledger.outbox import DeliveryReport, NotifyConfig

_log = get_logger("continuum.outbox")


class BackgroundDelivery:
    """Delivers the outbox from inside a long-running server (``continuum-mcp``,
    ``continuum ui``, the gateways) while a webhook is configured: a daemon thread that
    opens the store (never creating it), takes its one deliverer role
    (``Storage.deliverer_lock``: one deliverer per store at a time, across processes; the
    others wait and take over when it goes) and runs ``deliver_loop``, with the command's
    claim and compare-and-set rules, retries and backoff. The settings are read again on
    each pass; without a webhook it only waits. ``stop`` releases the role."""

    def __init__(
        self,
        open_store: Callable[[], Storage],
        load: Callable[[], NotifyConfig],
        *,
        poll_seconds: float = 2.0,
        name: str = "server",
        watch: Callable[[Storage], None] | None = None,
    ) -> None:
        self.open_store, self.load, self.watch = open_store, load, watch
        self.poll_seconds, self.name = poll_seconds, name
        self.stopping = threading.Event()
        self.holding = threading.Event()  # this process is the store's deliverer now
        self._thread = threading.Thread(target=self._run, name="continuum-outbox", daemon=True)

    def start(self) -> BackgroundDelivery:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self._thread.join(timeout)

    def _configured(self) -> bool:
        try:
            return bool(self.load().webhooks)
        except ContinuumError as e:  # a malformed file: logged, waited out
            _log.error("outbox.bad_config", code=e.code, message=e.message)
            return False

    def _after_pass(self, store: Storage, _report: DeliveryReport) -> None:
        self._watch(store)

    def _watch(self, store: Storage) -> None:
        """The deliverer's look at the store after each pass (a server's verdict watch,
        which writes what it finds to the outbox); its failure never stops delivery."""
        if self.watch is None:
            return
        try:
            self.watch(store)
        except Exception as e:
            _log.error("outbox.watch_failed", error=str(e)[:500])

    def _run(self) -> None:
        store: Storage | None = None
        release: Callable[[], None] | None = None
        try:
            while not self.stopping.is_set():
                if not self._configured():
                    self.stopping.wait(self.poll_seconds)
                    continue
                try:
                    store = store or self.open_store()
                    release = store.deliverer_lock()
                except ContinuumError as e:  # no store yet, or unreachable: try again
                    _log.info("outbox.not_delivering", code=e.code, message=e.message)
                if store is None or release is None:  # another process delivers: stand by
                    self.stopping.wait(self.poll_seconds)
                    continue
                self.holding.set()
                _log.info("outbox.delivering", by=self.name)
                from continuum.ledger.outbox import deliver_loop

                deliver_loop(
                    store,
                    self.load,
                    stop=self.stopping,
                    poll_seconds=self.poll_seconds,
                    on_pass=functools.partial(self._after_pass, store),
                )
        except Exception as e:  # never take the server down with it
            _log.error("outbox.deliverer_stopped", error=str(e)[:500])
        finally:
            self.holding.clear()
            if release is not None:
                release()
            if store is not None:
                store.close()


@contextmanager
def delivering(
    url: str,
    directory: str,
    name: str,
    *,
    poll_seconds: float = 2.0,
    watch: Callable[[Storage], None] | None = None,
) -> Iterator[BackgroundDelivery]:
    """While a server runs (``continuum-mcp``, ``continuum ui``, a gateway), deliver the
    store's outbox in the background when a webhook is configured (``notify.toml`` of
    ``directory`` or beside the store; ``BackgroundDelivery``), and after each pass run
    ``watch`` (the verdict watch: ``runtime.verdicts``); never a reason not to serve."""
    from continuum.store import open_store

    def load() -> NotifyConfig:
        from continuum.ledger.outbox import load_notify, notify_paths

        return load_notify(notify_paths(directory, url))

    delivery = BackgroundDelivery(
        lambda: open_store(url, create=False),
        load,
        poll_seconds=poll_seconds,
        name=name,
        watch=watch,
    ).start()
    try:
        yield delivery
    finally:
        delivery.stop()


__all__ = ["BackgroundDelivery", "delivering"]
