// failer: the worker for the teardown case. The rank named FAIL_RANK (default
// 1, read from $RANK, which flowrun and torchrun both set) writes the
// CLOCK_REALTIME nanoseconds to STAMP_FILE and exits with CODE (default 3) at
// once; every other rank sleeps 60 s, so only the launcher can end it early.
//
//   failer STAMP_FILE [FAIL_RANK [CODE]]
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: failer STAMP_FILE [FAIL_RANK [CODE]]\n");
    return 2;
  }
  const char* rank_text = getenv("RANK");
  int rank = rank_text ? atoi(rank_text) : -1;
  int fail_rank = argc > 2 ? atoi(argv[2]) : 1;
  int code = argc > 3 ? atoi(argv[3]) : 3;
  if (rank == fail_rank) {
    char text[32];
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return 2;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int len = snprintf(text, sizeof text, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    if (write(fd, text, (size_t)len) != len) return 2;
    close(fd);
    _exit(code);
  }
  struct timespec rest = {60, 0};
  while (nanosleep(&rest, &rest) != 0) {
  }
  return 0;
}
