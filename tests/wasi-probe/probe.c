// TEST TOOL, not a transform to use: a guest that asks WASI for what a
// sandboxed transform must not get (the time, the environment, a file, fresh
// randomness, a sleep that holds its row without using CPU) and writes down
// what it was given, so `weir test` can check that weir's WASI context grants
// nothing. It uses stdio on purpose, so it is
// built with the WASI preview 1 adapter.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "node.h"

bool exports_weir_transform_transform_configure(exports_weir_transform_transform_json_t *options,
                                                exports_weir_transform_transform_node_info_t *ret,
                                                exports_weir_transform_transform_config_error_t *err) {
  (void)err;
  exports_weir_transform_transform_json_free(options);
  static const char *fields[] = {"wall_clock", "monotonic_clock", "home", "file", "random",
                                 "slept"};
  size_t n = sizeof fields / sizeof *fields;
  ret->output_fields.len = n;
  ret->output_fields.ptr = malloc(n * sizeof(node_string_t));
  for (size_t i = 0; i < n; i++) node_string_dup(&ret->output_fields.ptr[i], fields[i]);
  return true;
}

// What WASI gives, as the JSON fields to add to a row.
static int observe(char *out, size_t size) {
  struct timespec mono;
  clock_gettime(CLOCK_MONOTONIC, &mono);
  // On a stopped clock an hour's sleep must end at once.
  int slept = sleep(3600) == 0;
  const char *home = getenv("HOME");
  FILE *file = fopen("/etc/passwd", "r");
  unsigned char bytes[4] = {0};
  int random_ok = getentropy(bytes, sizeof bytes) == 0;
  fprintf(stderr, "probe: observed\n");
  return snprintf(out, size,
                  "\"wall_clock\":%lld,\"monotonic_clock\":%lld,\"home\":%s%s%s,"
                  "\"file\":\"%s\",\"random\":\"%s%02x%02x%02x%02x\",\"slept\":%s",
                  (long long)time(NULL), (long long)mono.tv_sec, home ? "\"" : "",
                  home ? home : "null", home ? "\"" : "", file ? "readable" : "denied",
                  random_ok ? "" : "unavailable:", bytes[0], bytes[1], bytes[2], bytes[3],
                  slept ? "true" : "false");
}

void exports_weir_transform_transform_process(exports_weir_transform_transform_list_json_t *rows,
                                              exports_weir_transform_transform_list_outcome_t *ret) {
  ret->len = rows->len;
  ret->ptr = malloc((rows->len ? rows->len : 1) * sizeof(*ret->ptr));
  for (size_t i = 0; i < rows->len; i++) {
    node_string_t *row = &rows->ptr[i];
    char fields[512];
    int len = observe(fields, sizeof fields);
    // The row is a JSON object: drop its closing brace and append the fields.
    size_t keep = row->len;
    while (keep && row->ptr[keep - 1] != '}') keep--;
    size_t total = keep + (size_t)len + 2;
    char *text = malloc(total);
    memcpy(text, row->ptr, keep ? keep - 1 : 0);
    size_t at = keep ? keep - 1 : 0;
    if (at > 1) text[at++] = ',';
    memcpy(text + at, fields, (size_t)len);
    at += (size_t)len;
    text[at++] = '}';
    ret->ptr[i].tag = EXPORTS_WEIR_TRANSFORM_TRANSFORM_OUTCOME_ROWS;
    ret->ptr[i].val.rows.len = 1;
    ret->ptr[i].val.rows.ptr = malloc(sizeof(node_string_t));
    ret->ptr[i].val.rows.ptr[0] = (node_string_t){(uint8_t *)text, at};
  }
  exports_weir_transform_transform_list_json_free(rows);
}
