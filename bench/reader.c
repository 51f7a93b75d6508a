// reader: reads a forwarder's stdout and checks every line the producers
// wrote (bench/producer.c), so a forwarder cannot skip work or damage output
// unnoticed.
//
//   reader FORMAT RANKS LINES_PER_RANK [RESULT_FILE]
//
// FORMAT is the prefix each line is expected to carry:
//   none          no prefix (bench/forward)
//   flowrun:STEP  "[STEP rN] " (flowrun)
//   torchrun      "[defaultN]:" (torchrun --tee 3, role "default")
// For every line it checks: the prefix names rank N; the payload is exactly
// "BENCH rNNN sSSSSSSSSSSSS " + 74 filler bytes + "\n" with the producer's
// filler; the payload's rank equals the prefix's; its sequence number is the
// next one expected for that rank (lines arrive in order per rank). At the end
// every rank must have delivered LINES_PER_RANK lines.
// Counts: ok (verified lines), torn (a line with a payload marker that fails
// any check, or a last line without "\n"), lost (sequence numbers never seen),
// dup (a sequence number at or below one already seen), other (lines with no
// payload marker: the forwarder's own messages; the first 3 are echoed to
// stderr). Prints "ok=.. torn=.. lost=.. dup=.. other=.. bytes=.." to
// RESULT_FILE (default stdout); exits 0 only when torn, lost and dup are 0.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kLine = 100, kChunk = 1 << 20 };
static const char kMarker[] = "BENCH r";

static int parse_uint(const char* p, const char* end, int digits, unsigned long long* value) {
  unsigned long long v = 0;
  if (end - p < digits) return 0;
  for (int i = 0; i < digits; ++i) {
    if (p[i] < '0' || p[i] > '9') return 0;
    v = v * 10 + (unsigned long long)(p[i] - '0');
  }
  *value = v;
  return 1;
}

// Reads a decimal number of 1 to 6 digits at *p, moving *p past it.
static int parse_rank(const char** p, const char* end, int* rank) {
  int v = 0, n = 0;
  while (*p < end && **p >= '0' && **p <= '9' && n < 6) v = v * 10 + (*(*p)++ - '0'), ++n;
  *rank = v;
  return n > 0;
}

struct state {
  const char* format;  // "none", "torchrun" or the STEP of flowrun:STEP
  int ranks;
  unsigned long long lines_per_rank;
  unsigned long long* next;
  unsigned long long ok, torn, lost, dup, other, bytes;
};

// Returns the payload's start after a valid prefix (and the prefix's rank), or NULL.
static const char* strip_prefix(const struct state* s, const char* line, const char* end, int* rank) {
  const char* p = line;
  *rank = -1;
  if (strcmp(s->format, "none") == 0) return p;
  if (strcmp(s->format, "torchrun") == 0) {
    if (end - p < 9 || memcmp(p, "[default", 8) != 0) return NULL;
    p += 8;
    if (!parse_rank(&p, end, rank) || end - p < 2 || p[0] != ']' || p[1] != ':') return NULL;
    return p + 2;
  }
  size_t step = strlen(s->format);
  if ((size_t)(end - p) < step + 3 || p[0] != '[' || memcmp(p + 1, s->format, step) != 0) return NULL;
  p += 1 + step;
  if (end - p < 2 || p[0] != ' ' || p[1] != 'r') return NULL;
  p += 2;
  if (!parse_rank(&p, end, rank) || end - p < 2 || p[0] != ']' || p[1] != ' ') return NULL;
  return p + 2;
}

static void check_line(struct state* s, const char* line, const char* end) {
  int prefix_rank;
  const char* p = strip_prefix(s, line, end, &prefix_rank);
  if (!memmem(line, (size_t)(end - line), kMarker, sizeof kMarker - 1)) {
    if (s->other++ < 3)
      fprintf(stderr, "reader: other line: %.*s", (int)(end - line > 200 ? 200 : end - line), line);
    return;
  }
  unsigned long long r, seq;
  if (!p || end - p != kLine || memcmp(p, kMarker, 7) != 0 || !parse_uint(p + 7, end, 3, &r) ||
      p[10] != ' ' || p[11] != 's' || !parse_uint(p + 12, end, 12, &seq) || p[24] != ' ' ||
      p[kLine - 1] != '\n' || (int)r >= s->ranks ||
      (prefix_rank >= 0 && (unsigned long long)prefix_rank != r)) {
    ++s->torn;
    return;
  }
  char fill = (char)('a' + r % 26);
  for (int i = 25; i < kLine - 1; ++i) {
    if (p[i] != fill) {
      ++s->torn;
      return;
    }
  }
  if (seq < s->next[r]) {
    ++s->dup;
    return;
  }
  s->lost += seq - s->next[r];
  s->next[r] = seq + 1;
  ++s->ok;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: reader FORMAT RANKS LINES_PER_RANK [RESULT_FILE]\n");
    return 2;
  }
  struct state s = {0};
  s.format = argv[1];
  if (strncmp(s.format, "flowrun:", 8) == 0) s.format += 8;
  s.ranks = atoi(argv[2]);
  s.lines_per_rank = strtoull(argv[3], NULL, 10);
  s.next = calloc((size_t)s.ranks, sizeof *s.next);

  char* buf = malloc(2 * kChunk);
  size_t held = 0;
  for (;;) {
    ssize_t n = read(0, buf + held, kChunk);
    if (n <= 0) break;
    s.bytes += (unsigned long long)n;
    size_t total = held + (size_t)n;
    const char* p = buf;
    const char* end = buf + total;
    const char* nl;
    while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
      check_line(&s, p, nl + 1);
      p = nl + 1;
    }
    held = (size_t)(end - p);
    if (held >= kChunk) {  // a "line" of 1 MiB: no forwarder should make one
      ++s.torn;
      held = 0;
    }
    memmove(buf, p, held);
  }
  if (held) ++s.torn;
  for (int r = 0; r < s.ranks; ++r)
    if (s.next[r] < s.lines_per_rank) s.lost += s.lines_per_rank - s.next[r];

  FILE* out = stdout;
  if (argc > 4 && !(out = fopen(argv[4], "w"))) return 2;
  fprintf(out, "ok=%llu torn=%llu lost=%llu dup=%llu other=%llu bytes=%llu\n", s.ok, s.torn, s.lost, s.dup,
          s.other, s.bytes);
  if (out != stdout) fclose(out);
  return s.torn || s.lost || s.dup ? 1 : 0;
}
