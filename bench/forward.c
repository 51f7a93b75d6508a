// forward: the floor for log forwarding. Starts N copies of COMMAND (each
// with RANK=i and its stdout on a pipe), then poll(2)s the N pipes, reads up
// to 64 KiB at a time and writes what it read to its own stdout: whole lines
// only (the bytes after a pipe's last newline wait for the next read), so
// ranks never interleave inside a line; no prefixes. With -t DIR it also
// writes each pipe's bytes, as read, to DIR/rank<i>.log (what a launcher that
// keeps per-rank log files has to do as well).
//
//   forward [-t DIR] N COMMAND [ARGS...]
//
// Exits 0 when every child exited 0, 1 otherwise.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kRead = 64 * 1024, kBuf = 2 * kRead };

static int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int main(int argc, char** argv) {
  const char* tee_dir = NULL;
  if (argc > 2 && strcmp(argv[1], "-t") == 0) {
    tee_dir = argv[2];
    argv += 2;
    argc -= 2;
  }
  if (argc < 3) {
    fprintf(stderr, "usage: forward [-t DIR] N COMMAND [ARGS...]\n");
    return 2;
  }
  int n = atoi(argv[1]);
  int* logs = calloc((size_t)n, sizeof *logs);
  struct pollfd* fds = calloc((size_t)n, sizeof *fds);
  char** bufs = calloc((size_t)n, sizeof *bufs);
  size_t* held = calloc((size_t)n, sizeof *held);
  for (int i = 0; i < n; ++i) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return 1;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      char rank[16];
      snprintf(rank, sizeof rank, "%d", i);
      setenv("RANK", rank, 1);
      dup2(p[1], 1);
      execvp(argv[2], argv + 2);
      _exit(127);
    }
    close(p[1]);
    fds[i].fd = p[0];
    fds[i].events = POLLIN;
    bufs[i] = malloc(kBuf);
    logs[i] = -1;
    if (tee_dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/rank%d.log", tee_dir, i);
      if ((logs[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        perror(path);
        return 1;
      }
    }
  }

  int open_pipes = n;
  while (open_pipes > 0) {
    if (poll(fds, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t r = read(fds[i].fd, bufs[i] + held[i], kRead);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        if (held[i] && write_all(1, bufs[i], held[i]) != 0) return 1;
        held[i] = 0;
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
        continue;
      }
      if (logs[i] >= 0 && write_all(logs[i], bufs[i] + held[i], (size_t)r) != 0) return 1;
      size_t total = held[i] + (size_t)r;
      char* last = memrchr(bufs[i], '\n', total);
      size_t whole = last ? (size_t)(last - bufs[i]) + 1 : (total > kRead ? total : 0);
      if (whole && write_all(1, bufs[i], whole) != 0) return 1;
      memmove(bufs[i], bufs[i] + whole, total - whole);
      held[i] = total - whole;
    }
  }
  int failed = 0, status;
  for (int i = 0; i < n; ++i) {
    if (wait(&status) < 0) return 1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
