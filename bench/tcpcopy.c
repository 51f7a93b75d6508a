// tcpcopy: the floor for gathering outputs over the network. Copies each
// FILE over its own loopback TCP connection, sent by its own process, into
// DIR, received by one process that polls every connection and writes what
// it reads to a file per connection (as the head is one process receiving
// from every agent). No framing, no checksum.
//
//   tcpcopy DIR FILE...
//
// Prints "bytes=N wall_ns=T": the bytes written and the time from the
// first fork to the last connection's end of stream, its file closed.
// Exits 1 on any error or short copy.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 20)
#define MAX_FILES 64

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char* what) {
  fprintf(stderr, "tcpcopy: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void send_file(const struct sockaddr_in* addr, const char* path) {
  int in = open(path, O_RDONLY);
  if (in < 0) die(path);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0 || connect(s, (const struct sockaddr*)addr, sizeof *addr) != 0) die("connect");
  char* buf = malloc(CHUNK);
  ssize_t n;
  while ((n = read(in, buf, CHUNK)) > 0) {
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(s, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) die("send");
      off += w;
    }
  }
  if (n < 0) die(path);
  close(s);
  _exit(0);
}

int main(int argc, char** argv) {
  if (argc < 3 || argc - 2 > MAX_FILES) {
    fprintf(stderr, "usage: tcpcopy DIR FILE... (at most %d files)\n", MAX_FILES);
    return 2;
  }
  const char* dir = argv[1];
  int files = argc - 2;
  long long expected = 0;
  for (int i = 0; i < files; ++i) {
    struct stat st;
    if (stat(argv[2 + i], &st) != 0) die(argv[2 + i]);
    expected += st.st_size;
  }
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  if (listener < 0 || bind(listener, (struct sockaddr*)&addr, sizeof addr) != 0 ||
      listen(listener, 64) != 0 || getsockname(listener, (struct sockaddr*)&addr, &len) != 0)
    die("listen");

  long long t0 = now_ns();
  for (int i = 0; i < files; ++i) {
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) send_file(&addr, argv[2 + i]);
  }
  struct pollfd fds[MAX_FILES];
  int out[MAX_FILES];
  for (int i = 0; i < files; ++i) {
    fds[i].fd = accept(listener, NULL, NULL);
    if (fds[i].fd < 0) die("accept");
    fds[i].events = POLLIN;
    char path[4096];
    snprintf(path, sizeof path, "%s/copy%d", dir, i);
    out[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out[i] < 0) die(path);
  }
  char* buf = malloc(CHUNK);
  long long got = 0;
  int open_conns = files;
  while (open_conns > 0) {
    if (poll(fds, (nfds_t)files, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    for (int i = 0; i < files; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, CHUNK);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) die("recv");
      if (n == 0) {
        close(fds[i].fd);
        close(out[i]);
        fds[i].fd = -1;
        --open_conns;
        continue;
      }
      for (ssize_t off = 0; off < n;) {
        ssize_t w = write(out[i], buf + off, (size_t)(n - off));
        if (w < 0) die("write");
        off += w;
      }
      got += n;
    }
  }
  long long wall = now_ns() - t0;
  int status, failed = 0;
  for (int i = 0; i < files; ++i) {
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  if (failed || got != expected) {
    fprintf(stderr, "tcpcopy: copied %lld of %lld bytes%s\n", got, expected,
            failed ? ", a sender failed" : "");
    return 1;
  }
  printf("bytes=%lld wall_ns=%lld\n", got, wall);
  return 0;
}
