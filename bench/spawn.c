// spawn: the floor for starting workers. Forks N children that each exec
// COMMAND, then waits for all of them; nothing else (no pipes, no logs).
//
//   spawn N COMMAND [ARGS...]
//
// Exits 0 when every child exited 0, 1 otherwise.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: spawn N COMMAND [ARGS...]\n");
    return 2;
  }
  int n = atoi(argv[1]);
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("spawn: fork");
      return 1;
    }
    if (pid == 0) {
      execvp(argv[2], argv + 2);
      fprintf(stderr, "spawn: %s: %s\n", argv[2], strerror(errno));
      _exit(127);
    }
  }
  int failed = 0, status;
  for (int i = 0; i < n; ++i) {
    if (wait(&status) < 0) return 1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
