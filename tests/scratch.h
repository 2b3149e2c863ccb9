/* What the C unit tests that write files share (tests/test_durable.c, tests/test_kvfile.c): a
   folder of their own for this run, and the pid of a process known to have exited (a writer
   killed mid-file, whose leftovers must be swept or ignored). */
#ifndef TESTS_SCRATCH_H
#define TESTS_SCRATCH_H
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Makes /tmp/NAME.PID and writes its path into dir: 0, or -1 after a "FAIL setup" line. */
static int scratch_dir(char *dir, size_t n, const char *name) {
    snprintf(dir, n, "/tmp/%s.%d", name, (int)getpid());
    if (!mkdir(dir, 0700)) return 0;
    printf("FAIL setup: cannot create %s: %s\n", dir, strerror(errno));
    return -1;
}

/* A pid that belonged to a process that has exited (`true`, reaped). Spawned, not forked: a forked
   copy of a sanitized test would run the leak check on its way out. */
static pid_t dead_pid(void) {
    pid_t pid = 0;
    char *argv[] = { "true", NULL };
    if (posix_spawnp(&pid, "true", NULL, NULL, argv, environ)) return 0;
    waitpid(pid, NULL, 0);
    return pid;
}

#endif
