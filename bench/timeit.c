// timeit: runs one command and reports, for that process alone, how long it
// ran and how much memory it used. Used by scripts/bench for every figure.
//
//   timeit [-o FILE] [-t SECONDS] [-m] -- COMMAND [ARGS...]
//
// Prints one line of key=value pairs to FILE (default stderr):
//   exit=N | signal=N       how the command ended
//   wall_ns=N               CLOCK_MONOTONIC from just before fork to just after wait4 returned
//   start_realtime_ns=N     CLOCK_REALTIME just before fork
//   end_realtime_ns=N       CLOCK_REALTIME just after wait4 returned (teardown is measured against it)
//   maxrss_kib=N            ru_maxrss from wait4 on the command's pid (not RUSAGE_CHILDREN of
//                           timeit, which would also count every grandchild). Linux fills it with
//                           the larger of the process's own peak and that of the children it reaped.
//   cpu_ns=N                user + system CPU time from the same wait4: the process's own and that of
//                           the children it reaped (the workers), as Linux accounts them
//   hwm_kib=N               with -m: the last VmHWM read from /proc/PID/status while it ran
//                           (the process's own peak only; sampled every millisecond, 0 if never read)
//   timed_out=0|1           with -t: the command ran past SECONDS and was sent SIGTERM,
//                           then SIGKILL 5 s later
// timeit's own exit code is 0 when it could run and wait for the command, whatever the command returned.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long read_hwm_kib(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* p = strstr(buf, "VmHWM:");
  return p ? strtol(p + 6, NULL, 10) : -1;
}

int main(int argc, char** argv) {
  const char* out_path = NULL;
  double timeout_s = 0;
  int sample_memory = 0;
  int opt;
  while ((opt = getopt(argc, argv, "+o:t:m")) != -1) {
    switch (opt) {
      case 'o': out_path = optarg; break;
      case 't': timeout_s = atof(optarg); break;
      case 'm': sample_memory = 1; break;
      default: fprintf(stderr, "usage: timeit [-o FILE] [-t SECONDS] [-m] -- COMMAND [ARGS...]\n"); return 2;
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "timeit: no command\n");
    return 2;
  }
  FILE* out = stderr;
  if (out_path && !(out = fopen(out_path, "w"))) {
    fprintf(stderr, "timeit: %s: %s\n", out_path, strerror(errno));
    return 2;
  }

  int64_t start_real = now_ns(CLOCK_REALTIME);
  int64_t start = now_ns(CLOCK_MONOTONIC);
  pid_t pid = fork();
  if (pid < 0) {
    perror("timeit: fork");
    return 2;
  }
  if (pid == 0) {
    execvp(argv[optind], argv + optind);
    fprintf(stderr, "timeit: %s: %s\n", argv[optind], strerror(errno));
    _exit(127);
  }

  // A pidfd becomes readable the moment the process exits, so waiting on it with
  // a timeout costs no precision; the timeout only paces memory samples.
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  char status_path[64];
  snprintf(status_path, sizeof status_path, "/proc/%d/status", (int)pid);
  long hwm = 0;
  int timed_out = 0;
  int64_t deadline = timeout_s > 0 ? start + (int64_t)(timeout_s * 1e9) : INT64_MAX;
  int64_t kill_at = INT64_MAX;
  while (pidfd >= 0) {
    int wait_ms = sample_memory ? 1 : 100;
    if (!sample_memory && deadline == INT64_MAX) wait_ms = -1;
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    int r = poll(&pfd, 1, wait_ms);
    if (r > 0) break;
    if (r < 0 && errno != EINTR) break;
    if (sample_memory) {
      long v = read_hwm_kib(status_path);
      if (v > hwm) hwm = v;
    }
    int64_t t = now_ns(CLOCK_MONOTONIC);
    if (!timed_out && t > deadline) {
      timed_out = 1;
      kill(pid, SIGTERM);
      kill_at = t + 5000000000LL;
    } else if (timed_out && t > kill_at) {
      kill(pid, SIGKILL);
      kill_at = INT64_MAX;
    }
  }

  int status = 0;
  struct rusage ru;
  pid_t got;
  do {
    got = wait4(pid, &status, 0, &ru);
  } while (got < 0 && errno == EINTR);
  int64_t end = now_ns(CLOCK_MONOTONIC);
  int64_t end_real = now_ns(CLOCK_REALTIME);
  if (got < 0) {
    perror("timeit: wait4");
    return 2;
  }

  if (WIFEXITED(status))
    fprintf(out, "exit=%d", WEXITSTATUS(status));
  else
    fprintf(out, "signal=%d", WTERMSIG(status));
  long long cpu_ns = ((long long)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
                     ((long long)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
  fprintf(out,
          " wall_ns=%lld cpu_ns=%lld start_realtime_ns=%lld end_realtime_ns=%lld maxrss_kib=%ld hwm_kib=%ld "
          "timed_out=%d\n",
          (long long)(end - start), cpu_ns, (long long)start_real, (long long)end_real, ru.ru_maxrss, hwm,
          timed_out);
  if (out != stderr) fclose(out);
  return 0;
}
