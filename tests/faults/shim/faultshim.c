/* Faults injected at the C library boundary, for the fault matrix (LD_PRELOAD).
 *
 * RGT_FAULT_FSYNC_EIO=SUBSTRING  fsync/fdatasync of a file whose path contains SUBSTRING fail
 *                                with EIO (the disk did not confirm the write); the data was
 *                                written, as with a real failing disk.
 * RGT_FAULT_CLOCK_OFFSET_S=N     the wall clock (time, gettimeofday, clock_gettime REALTIME)
 *                                reads N seconds off; monotonic clocks are untouched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int path_matches(int fd) {
    const char *want = getenv("RGT_FAULT_FSYNC_EIO");
    if (want == NULL || *want == '\0') return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) return 0;
    path[n] = '\0';
    return strstr(path, want) != NULL;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (path_matches(fd)) { errno = EIO; return -1; }
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (path_matches(fd)) { errno = EIO; return -1; }
    return real(fd);
}

static long offset_s(void) {
    const char *s = getenv("RGT_FAULT_CLOCK_OFFSET_S");
    return s ? strtol(s, NULL, 10) : 0;
}

int clock_gettime(clockid_t clk, struct timespec *tp) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(clk, tp);
    if (rc == 0 && tp && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE))
        tp->tv_sec += offset_s();
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    static int (*real)(struct timeval *restrict, void *restrict);
    if (!real) real = (int (*)(struct timeval *restrict, void *restrict))dlsym(RTLD_NEXT, "gettimeofday");
    int rc = real(tv, tz);
    if (rc == 0 && tv) tv->tv_sec += offset_s();
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
