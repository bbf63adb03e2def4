/*
 * ids.h — validation of the names that reach us from outside.
 * Each returns 1 when valid, 0 otherwise; none allocates.
 */
#ifndef SBX_IDS_H
#define SBX_IDS_H

#include <stddef.h>

/* Sandbox id and tenant: 1–63 of [a-z0-9-], not starting or ending with '-'. */
int ids_valid_sandbox(const char *s);
int ids_valid_tenant(const char *s);
/* Session / process id chosen by a client: 1–64 of [A-Za-z0-9_.-], not "."/"..". */
int ids_valid_name(const char *s);
/* Node name: 1–63 of [a-z0-9-]. */
int ids_valid_node(const char *s);
/* Preview token: [a-z0-9_]{1,16}. */
int ids_valid_token(const char *s);
/* Label key/value: 1–63 / 0–255 printable ASCII without '{', '}', ':' in keys. */
int ids_valid_label_key(const char *s);
int ids_valid_label_value(const char *s);
/* Image name: 1–63 of [a-z0-9._-], starting with [a-z0-9] (so never "."
 * or "..", never a path). */
int ids_valid_image(const char *s);
/* Environment variable name: 1–IDS_ENV_NAME_MAX of [A-Za-z0-9_], not
 * starting with a digit. */
#define IDS_ENV_NAME_MAX 128
int ids_valid_env_name(const char *s);
/* A string that is valid UTF-8 of n bytes without NUL. */
int ids_valid_utf8(const char *s, size_t n);

#endif
