// topic: labels each row's text with one of the configured topics, asked of
// a chat model.
//
// Options (the node's `options:` in the pipeline file):
//   labels    (required) the topics to choose from
//   field     (default "text") the row field to classify
//   output    (default "topic") the field the label is written to
//   model     sent as the request's model when given
//   endpoint  which granted endpoint to ask; by default the only one
//
// Row errors: missing_field, unknown_label (the model answered something
// else), llm_call_failed, retry_timeout, endpoint_denied, invalid_response.
//
// JSON is read and written with yyjson (third_party/, MIT). Memory: the
// arguments of an export belong to this code and are freed here; what an
// export returns is freed by the generated post-return function.

#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "yyjson.h"

// ---- growable text, so no stdio (and so no WASI import) is needed ----

typedef struct {
  char *ptr;
  size_t len, cap;
} text_t;

static void text_add_n(text_t *t, const char *s, size_t n) {
  if (t->len + n + 1 > t->cap) {
    t->cap = (t->len + n + 1) * 2;
    t->ptr = realloc(t->ptr, t->cap);
  }
  memcpy(t->ptr + t->len, s, n);
  t->len += n;
  t->ptr[t->len] = 0;
}

static void text_add(text_t *t, const char *s) { text_add_n(t, s, strlen(s)); }

static void text_add_uint(text_t *t, unsigned v) {
  char digits[12];
  int i = sizeof digits;
  do {
    digits[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  text_add_n(t, digits + i, sizeof digits - i);
}

// Hands the text over as a component string (the receiver frees it).
static node_string_t text_take(text_t *t) {
  if (!t->ptr) text_add_n(t, "", 0);
  node_string_t s = {(uint8_t *)t->ptr, t->len};
  *t = (text_t){0};
  return s;
}

static node_string_t string_of(const char *s) {
  text_t t = {0};
  text_add(&t, s);
  return text_take(&t);
}

// ---- the node's settings, set once by configure ----

static struct {
  char **labels;
  size_t label_count;
  char *field, *output, *model, *endpoint;
  char *system_prompt;
} topic;

static char *copy_n(const char *s, size_t n) {
  char *c = malloc(n + 1);
  memcpy(c, s, n);
  c[n] = 0;
  return c;
}

static char *copy(const char *s) { return copy_n(s, strlen(s)); }

// A text option, or `fallback` when absent; NULL with *err set when not text.
static char *text_option(yyjson_val *options, const char *name, const char *fallback,
                         text_t *err) {
  yyjson_val *v = yyjson_obj_get(options, name);
  if (!v) return fallback ? copy(fallback) : NULL;
  if (!yyjson_is_str(v)) {
    text_add(err, "options.");
    text_add(err, name);
    text_add(err, ": give it as text");
    return NULL;
  }
  return copy_n(yyjson_get_str(v), yyjson_get_len(v));
}

static const char *KNOWN[] = {"labels", "field", "output", "model", "endpoint"};

static bool check_options(yyjson_val *options, text_t *err) {
  if (!yyjson_is_obj(options)) {
    text_add(err, "options: give them as a mapping");
    return false;
  }
  size_t idx, max;
  yyjson_val *key, *val;
  yyjson_obj_foreach(options, idx, max, key, val) {
    bool known = false;
    for (size_t k = 0; k < sizeof KNOWN / sizeof *KNOWN; k++) {
      if (yyjson_equals_str(key, KNOWN[k])) known = true;
    }
    if (!known) {
      text_add(err, "options.");
      text_add(err, yyjson_get_str(key));
      text_add(err, ": unknown field `");
      text_add(err, yyjson_get_str(key));
      text_add(err, "`");
      return false;
    }
  }
  yyjson_val *labels = yyjson_obj_get(options, "labels");
  if (!yyjson_is_arr(labels)) {
    text_add(err, "options.labels: give the labels as a list of text");
    return false;
  }
  if (yyjson_arr_size(labels) == 0) {
    text_add(err, "options.labels: give at least one label");
    return false;
  }
  topic.label_count = yyjson_arr_size(labels);
  topic.labels = calloc(topic.label_count, sizeof(char *));
  text_t prompt = {0};
  text_add(&prompt, "Classify the text into exactly one of these labels: ");
  yyjson_arr_foreach(labels, idx, max, val) {
    if (!yyjson_is_str(val)) {
      text_add(err, "options.labels: give the labels as a list of text");
      return false;
    }
    topic.labels[idx] = copy_n(yyjson_get_str(val), yyjson_get_len(val));
    if (idx > 0) text_add(&prompt, ", ");
    text_add(&prompt, topic.labels[idx]);
  }
  text_add(&prompt, ". Answer with the label only.");
  topic.system_prompt = prompt.ptr;
  if (!(topic.field = text_option(options, "field", "text", err))) return false;
  if (!(topic.output = text_option(options, "output", "topic", err))) return false;
  topic.model = text_option(options, "model", NULL, err);
  return err->len == 0;
}

// The chosen endpoint if granted, else the only one granted.
static bool pick_endpoint(yyjson_val *options, text_t *err) {
  node_string_t node;
  node_list_string_t granted;
  weir_transform_context_node_name(&node);
  weir_transform_context_endpoints(&granted);
  char *chosen = text_option(options, "endpoint", NULL, err);
  if (chosen) {
    for (size_t i = 0; i < granted.len; i++) {
      if (granted.ptr[i].len == strlen(chosen) &&
          memcmp(granted.ptr[i].ptr, chosen, granted.ptr[i].len) == 0)
        topic.endpoint = chosen;
    }
    if (!topic.endpoint) {
      text_add(err, "options.endpoint: `");
      text_add(err, chosen);
      text_add(err, "` is not granted to node `");
      text_add_n(err, (char *)node.ptr, node.len);
      text_add(err, "`");
    }
  } else if (err->len == 0 && granted.len == 1) {
    topic.endpoint = copy_n((char *)granted.ptr[0].ptr, granted.ptr[0].len);
  } else if (err->len == 0) {
    text_add(err, "options.endpoint: node `");
    text_add_n(err, (char *)node.ptr, node.len);
    text_add(err, "` is granted ");
    text_add_uint(err, (unsigned)granted.len);
    text_add(err, " endpoints; name the one to use");
  }
  node_string_free(&node);
  node_list_string_free(&granted);
  return err->len == 0;
}

// The refusal in `message`, written as weir shows refusals
// (`options.NAME: what is wrong`), as the contract's config-error: the
// option's path and what is wrong with it.
static void config_error_of(text_t *message, exports_weir_transform_transform_config_error_t *err) {
  const char *text = message->ptr ? message->ptr : "";
  const char *rest = text;
  err->path.len = 0;
  err->path.ptr = NULL;
  if (strncmp(text, "options.", 8) == 0) {
    const char *name = text + 8;
    size_t n = strcspn(name, ": ");
    err->path.len = 1;
    err->path.ptr = malloc(sizeof(node_string_t));
    text_t key = {0};
    text_add_n(&key, name, n);
    err->path.ptr[0] = text_take(&key);
    rest = name + n;
  } else if (strncmp(text, "options", 7) == 0) {
    rest = text + 7;
  }
  while (*rest == ':' || *rest == ' ') rest++;
  err->message = string_of(rest);
  free(message->ptr);
  *message = (text_t){0};
}

bool exports_weir_transform_transform_configure(exports_weir_transform_transform_json_t *options,
                                                exports_weir_transform_transform_node_info_t *ret,
                                                exports_weir_transform_transform_config_error_t *err) {
  text_t message = {0};
  yyjson_doc *doc = yyjson_read((const char *)options->ptr, options->len, 0);
  yyjson_val *root = yyjson_doc_get_root(doc);
  bool ok = check_options(root, &message) && pick_endpoint(root, &message);
  yyjson_doc_free(doc);
  exports_weir_transform_transform_json_free(options);
  if (!ok) {
    config_error_of(&message, err);
    return false;
  }
  ret->output_fields.len = 1;
  ret->output_fields.ptr = malloc(sizeof(node_string_t));
  ret->output_fields.ptr[0] = string_of(topic.output);
  return true;
}

// ---- one row ----

typedef struct {
  yyjson_doc *row;  // NULL once the row has its outcome
  exports_weir_transform_transform_outcome_t outcome;
} row_state_t;

static void fail(row_state_t *state, const char *code, text_t *message) {
  state->outcome.tag = EXPORTS_WEIR_TRANSFORM_TRANSFORM_OUTCOME_FAILED;
  state->outcome.val.failed.code = string_of(code);
  state->outcome.val.failed.message = text_take(message);
  yyjson_doc_free(state->row);
  state->row = NULL;
}

static node_string_t request_body(const char *text, size_t len) {
  yyjson_mut_doc *doc = yyjson_mut_doc_new(NULL);
  yyjson_mut_val *body = yyjson_mut_obj(doc);
  yyjson_mut_doc_set_root(doc, body);
  if (topic.model) yyjson_mut_obj_add_str(doc, body, "model", topic.model);
  yyjson_mut_val *messages = yyjson_mut_obj_add_arr(doc, body, "messages");
  yyjson_mut_val *system = yyjson_mut_arr_add_obj(doc, messages);
  yyjson_mut_obj_add_str(doc, system, "role", "system");
  yyjson_mut_obj_add_str(doc, system, "content", topic.system_prompt);
  yyjson_mut_val *user = yyjson_mut_arr_add_obj(doc, messages);
  yyjson_mut_obj_add_str(doc, user, "role", "user");
  yyjson_mut_obj_add_strncpy(doc, user, "content", text, len);
  yyjson_mut_obj_add_int(doc, body, "temperature", 0);
  size_t out_len;
  char *out = yyjson_mut_write(doc, 0, &out_len);
  yyjson_mut_doc_free(doc);
  return (node_string_t){(uint8_t *)out, out_len};
}

static void status_failure(row_state_t *state, weir_transform_executor_response_t *response) {
  text_t message = {0};
  text_add(&message, "HTTP ");
  text_add_uint(&message, response->status);
  text_add(&message, ": ");
  yyjson_doc *doc = yyjson_read((const char *)response->body.ptr, response->body.len, 0);
  yyjson_val *said = yyjson_ptr_get(yyjson_doc_get_root(doc), "/error/message");
  if (yyjson_is_str(said)) {
    text_add_n(&message, yyjson_get_str(said), yyjson_get_len(said));
  } else {
    text_add_n(&message, (char *)response->body.ptr, response->body.len < 200 ? response->body.len : 200);
  }
  yyjson_doc_free(doc);
  fail(state, "llm_call_failed", &message);
}

static bool same_ignoring_case(const char *a, const char *b, size_t b_len) {
  if (strlen(a) != b_len) return false;
  for (size_t i = 0; i < b_len; i++) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x += 32;
    if (y >= 'A' && y <= 'Z') y += 32;
    if (x != y) return false;
  }
  return true;
}

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Writes the label the answer names onto the row, or fails the row.
static void label_row(row_state_t *state, const char *answer, size_t len) {
  while (len && is_space(*answer)) answer++, len--;
  while (len && is_space(answer[len - 1])) len--;
  size_t said = len;
  while (said && answer[said - 1] == '.') said--;
  while (said && is_space(answer[said - 1])) said--;
  for (size_t i = 0; i < topic.label_count; i++) {
    if (!same_ignoring_case(topic.labels[i], answer, said)) continue;
    yyjson_mut_doc *out = yyjson_doc_mut_copy(state->row, NULL);
    yyjson_mut_val *root = yyjson_mut_doc_get_root(out);
    yyjson_mut_obj_put(root, yyjson_mut_strcpy(out, topic.output),
                       yyjson_mut_strcpy(out, topic.labels[i]));
    size_t out_len;
    char *json = yyjson_mut_write(out, 0, &out_len);
    yyjson_mut_doc_free(out);
    state->outcome.tag = EXPORTS_WEIR_TRANSFORM_TRANSFORM_OUTCOME_ROWS;
    state->outcome.val.rows.len = 1;
    state->outcome.val.rows.ptr = malloc(sizeof(node_string_t));
    state->outcome.val.rows.ptr[0] = (node_string_t){(uint8_t *)json, out_len};
    yyjson_doc_free(state->row);
    state->row = NULL;
    return;
  }
  text_t message = {0};
  text_add(&message, "the model answered `");
  text_add_n(&message, answer, len);
  text_add(&message, "`, which is not one of: ");
  for (size_t i = 0; i < topic.label_count; i++) {
    if (i) text_add(&message, ", ");
    text_add(&message, topic.labels[i]);
  }
  fail(state, "unknown_label", &message);
}

static void answer_row(row_state_t *state, weir_transform_executor_result_response_call_error_t *result) {
  text_t message = {0};
  if (result->is_err) {
    weir_transform_executor_call_error_t *e = &result->val.err;
    switch (e->tag) {
      case WEIR_TRANSFORM_EXECUTOR_CALL_ERROR_STATUS:
        status_failure(state, &e->val.status);
        return;
      case WEIR_TRANSFORM_EXECUTOR_CALL_ERROR_DENIED:
        text_add_n(&message, (char *)e->val.denied.ptr, e->val.denied.len);
        fail(state, "endpoint_denied", &message);
        return;
      case WEIR_TRANSFORM_EXECUTOR_CALL_ERROR_DEADLINE_EXCEEDED:
        text_add_n(&message, (char *)e->val.deadline_exceeded.ptr, e->val.deadline_exceeded.len);
        fail(state, "retry_timeout", &message);
        return;
      default:
        text_add_n(&message, (char *)e->val.transport.ptr, e->val.transport.len);
        fail(state, "llm_call_failed", &message);
        return;
    }
  }
  weir_transform_executor_response_t *response = &result->val.ok;
  if (response->status >= 300) {
    status_failure(state, response);
    return;
  }
  yyjson_doc *doc = yyjson_read((const char *)response->body.ptr, response->body.len, 0);
  yyjson_val *content = yyjson_ptr_get(yyjson_doc_get_root(doc), "/choices/0/message/content");
  if (yyjson_is_str(content)) {
    label_row(state, yyjson_get_str(content), yyjson_get_len(content));
  } else {
    text_add(&message, "the answer has no choices[0].message.content");
    fail(state, "invalid_response", &message);
  }
  yyjson_doc_free(doc);
}

void exports_weir_transform_transform_process(exports_weir_transform_transform_list_json_t *rows,
                                              exports_weir_transform_transform_list_outcome_t *ret) {
  size_t n = rows->len;
  row_state_t *states = calloc(n ? n : 1, sizeof(row_state_t));
  weir_transform_executor_request_t *requests = calloc(n ? n : 1, sizeof(*requests));
  size_t *asked = calloc(n ? n : 1, sizeof(size_t));
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    states[i].row = yyjson_read((const char *)rows->ptr[i].ptr, rows->ptr[i].len, 0);
    yyjson_val *text = yyjson_obj_get(yyjson_doc_get_root(states[i].row), topic.field);
    if (!yyjson_is_str(text)) {
      text_t message = {0};
      text_add(&message, text ? "field `" : "the row has no field `");
      text_add(&message, topic.field);
      text_add(&message, text ? "` is not text" : "`");
      fail(&states[i], "missing_field", &message);
      continue;
    }
    requests[count].endpoint = (node_string_t){(uint8_t *)topic.endpoint, strlen(topic.endpoint)};
    requests[count].body = request_body(yyjson_get_str(text), yyjson_get_len(text));
    requests[count].row = (uint32_t)i;
    asked[count++] = i;
  }
  if (count) {
    // One call for every row's request: the host sends them concurrently.
    weir_transform_executor_list_request_t list = {requests, count};
    weir_transform_executor_list_result_response_call_error_t results;
    weir_transform_executor_send(&list, &results);
    for (size_t k = 0; k < results.len && k < count; k++) answer_row(&states[asked[k]], &results.ptr[k]);
    weir_transform_executor_list_result_response_call_error_free(&results);
    for (size_t k = 0; k < count; k++) free(requests[k].body.ptr);
  }
  ret->len = n;
  ret->ptr = malloc((n ? n : 1) * sizeof(exports_weir_transform_transform_outcome_t));
  for (size_t i = 0; i < n; i++) ret->ptr[i] = states[i].outcome;
  free(states);
  free(requests);
  free(asked);
  exports_weir_transform_transform_list_json_free(rows);
}
