// spawn: the floor for starting workers. Forks N children that each exec
// COMMAND, then waits for all of them; nothing else (no pipes, no logs).
//
//   spawn [-t DIR] N COMMAND [ARGS...]
//
// With -t DIR, it also keeps the record a launcher keeps of a run, as plainly
// as it can be kept, in DIR (which must exist): a run record written whole
// at the start (a new file renamed into place), for each child its
// directory DIR/rankI with an out/ directory in it and its stdout and stderr
// in DIR/rankI/stdout.log and stderr.log (created before its fork), an end
// record DIR/rankI/end.json written whole as it is reaped, and at the end a
// results record and the run record again (renamed over the first).
//
// Exits 0 when every child exited 0, 1 otherwise.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

// `text` into DIR/NAME, whole: a new file renamed into place.
static int write_whole(const char* dir, const char* name, const char* text) {
  char tmp[PATH_MAX], path[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  size_t len = strlen(text);
  ssize_t n = write(fd, text, len);
  close(fd);
  if (n != (ssize_t)len || rename(tmp, path) != 0) return -1;
  return 0;
}

static int fail(const char* what, const char* path) {
  fprintf(stderr, "spawn: %s %s: %s\n", what, path, strerror(errno));
  return 1;
}

int main(int argc, char** argv) {
  const char* dir = NULL;
  if (argc > 2 && strcmp(argv[1], "-t") == 0) {
    dir = argv[2];
    argv += 2;
    argc -= 2;
  }
  if (argc < 3) {
    fprintf(stderr, "usage: spawn [-t DIR] N COMMAND [ARGS...]\n");
    return 2;
  }
  int n = atoi(argv[1]);
  pid_t* pids = calloc((size_t)n, sizeof *pids);
  if (pids == NULL) return 1;
  char path[PATH_MAX], text[256];
  if (dir && write_whole(dir, "run.json", "{\"state\": \"running\"}\n") != 0) return fail("cannot write in", dir);
  for (int i = 0; i < n; ++i) {
    int out = -1, err = -1;
    if (dir) {
      snprintf(path, sizeof path, "%s/rank%d", dir, i);
      if (mkdir(path, 0755) != 0) return fail("cannot make", path);
      snprintf(path, sizeof path, "%s/rank%d/out", dir, i);
      if (mkdir(path, 0755) != 0) return fail("cannot make", path);
      snprintf(path, sizeof path, "%s/rank%d/stdout.log", dir, i);
      out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      snprintf(path, sizeof path, "%s/rank%d/stderr.log", dir, i);
      err = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (out < 0 || err < 0) return fail("cannot create", path);
    }
    pid_t pid = fork();
    if (pid < 0) {
      perror("spawn: fork");
      return 1;
    }
    if (pid == 0) {
      if (dir && (dup2(out, 1) < 0 || dup2(err, 2) < 0)) _exit(126);
      execvp(argv[2], argv + 2);
      fprintf(stderr, "spawn: %s: %s\n", argv[2], strerror(errno));
      _exit(127);
    }
    pids[i] = pid;
    if (dir) {
      close(out);
      close(err);
    }
  }
  int failed = 0, status;
  for (int reaped = 0; reaped < n; ++reaped) {
    pid_t pid = wait(&status);
    if (pid < 0) return 1;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0) failed = 1;
    if (!dir) continue;
    for (int i = 0; i < n; ++i) {
      if (pids[i] != pid) continue;
      snprintf(path, sizeof path, "%s/rank%d", dir, i);
      snprintf(text, sizeof text, "{\"rank\": %d, \"pid\": %d, \"exit_code\": %d}\n", i, (int)pid, code);
      if (write_whole(path, "end.json", text) != 0) return fail("cannot write in", path);
    }
  }
  if (dir) {
    snprintf(text, sizeof text, "{\"workers\": %d, \"failed\": %d}\n", n, failed);
    if (write_whole(dir, "results.json", text) != 0 ||
        write_whole(dir, "run.json", failed ? "{\"state\": \"failed\"}\n" : "{\"state\": \"succeeded\"}\n") != 0)
      return fail("cannot write in", dir);
  }
  free(pids);
  return failed;
}
