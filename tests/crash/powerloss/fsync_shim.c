/*
 * Power-loss simulator for the crash suite (F2): only fsynced bytes survive.
 *
 * Preloaded into a writer process (LD_PRELOAD), it keeps a "durable image" of every
 * regular file under $FSYNC_SHIM_WATCH: each successful fsync/fdatasync copies the
 * file's whole current content to $FSYNC_SHIM_IMAGE/<basename> (written to a temporary
 * name, then renamed, so the image is always one whole snapshot even if the writer is
 * killed mid-copy). A file never fsynced has no image; an unlinked file loses its image.
 * After a kill, the image directory is the disk as a power cut would have left it:
 * everything written but not fsynced is gone. For watched files the image IS the
 * durability model, so the real (slow) fsync is skipped there; other files get it.
 *
 * Built at test time: gcc -shared -fPIC -O2 -o fsync_shim.so fsync_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_unlink)(const char *);

static void resolve(void) {
    if (!real_fsync) real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (!real_fdatasync) real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (!real_unlink) real_unlink = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
}

/* The image path for `path` if it lies under the watched directory, else NULL. */
static int image_path(const char *path, char *out, size_t out_len) {
    const char *watch = getenv("FSYNC_SHIM_WATCH");
    const char *image = getenv("FSYNC_SHIM_IMAGE");
    if (!watch || !image || !*watch || !*image) return 0;
    size_t n = strlen(watch);
    if (strncmp(path, watch, n) != 0 || path[n] != '/') return 0;
    const char *base = strrchr(path, '/') + 1;
    return snprintf(out, out_len, "%s/%s", image, base) < (int)out_len;
}

/* Copy a watched file to its image; returns 1 if `fd` is a watched file. */
static int snapshot(int fd) {
    int saved = errno, watched = 0;
    char link[64], path[PATH_MAX], dest[PATH_MAX], tmp[PATH_MAX + 16];
    struct stat st;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, path, sizeof path - 1);
    if (len <= 0) goto out;
    path[len] = '\0';
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) goto out;
    if (!image_path(path, dest, sizeof dest)) goto out;
    watched = 1;
    snprintf(tmp, sizeof tmp, "%s.shim-tmp", dest);
    int out_fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out_fd < 0) {
        perror("fsync_shim: open image");
        abort(); /* a simulator that silently stops imaging would prove nothing */
    }
    char buf[1 << 16];
    off_t off = 0;
    for (;;) {
        ssize_t got = pread(fd, buf, sizeof buf, off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { perror("fsync_shim: read"); abort(); }
        if (got == 0) break;
        ssize_t done = 0;
        while (done < got) {
            ssize_t w = write(out_fd, buf + done, (size_t)(got - done));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) { perror("fsync_shim: write image"); abort(); }
            done += w;
        }
        off += got;
    }
    close(out_fd);
    if (rename(tmp, dest) != 0) { perror("fsync_shim: rename"); abort(); }
out:
    errno = saved;
    return watched;
}

int fsync(int fd) {
    resolve();
    if (snapshot(fd)) return 0;
    return real_fsync(fd);
}

int fdatasync(int fd) {
    resolve();
    if (snapshot(fd)) return 0;
    return real_fdatasync(fd);
}

int unlink(const char *path) {
    resolve();
    int rc = real_unlink(path);
    char dest[PATH_MAX];
    if (rc == 0 && image_path(path, dest, sizeof dest)) {
        int saved = errno;
        real_unlink(dest);
        errno = saved;
    }
    return rc;
}
