// producer: the worker for the log-forwarding case. Writes BYTES (rounded
// down to whole lines) to stdout as 100-byte lines, in 65,500-byte write(2)s
// (655 lines each), so the forwarder sees large writes that end on a line
// boundary but are read back in arbitrary pieces. Every line is unique and
// checkable by bench/reader:
//
//   "BENCH r007 s000000000042 " + 74 filler bytes ('a' + rank % 26) + "\n"
//
// where r is $RANK and s counts the rank's lines from 0.
//
//   producer BYTES
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kLine = 100, kLinesPerWrite = 655, kSeqAt = 12, kSeqDigits = 12 };

static void put_seq(char* line, unsigned long long seq) {
  for (int d = kSeqDigits - 1; d >= 0; --d) {
    line[kSeqAt + d] = (char)('0' + seq % 10);
    seq /= 10;
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: producer BYTES\n");
    return 2;
  }
  const char* rank_text = getenv("RANK");
  int rank = rank_text ? atoi(rank_text) : 0;
  unsigned long long lines = strtoull(argv[1], NULL, 10) / kLine;

  static char buf[kLine * kLinesPerWrite];
  for (int i = 0; i < kLinesPerWrite; ++i) {
    char* line = buf + i * kLine;
    int n = snprintf(line, kLine, "BENCH r%03d s%012d ", rank % 1000, 0);
    memset(line + n, 'a' + rank % 26, (size_t)(kLine - 1 - n));
    line[kLine - 1] = '\n';
  }

  unsigned long long seq = 0;
  while (seq < lines) {
    unsigned long long count = lines - seq < kLinesPerWrite ? lines - seq : kLinesPerWrite;
    for (unsigned long long i = 0; i < count; ++i) put_seq(buf + i * kLine, seq + i);
    const char* p = buf;
    size_t left = count * kLine;
    while (left > 0) {
      ssize_t w = write(1, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        perror("producer: write");
        return 1;
      }
      p += w;
      left -= (size_t)w;
    }
    seq += count;
  }
  return 0;
}
