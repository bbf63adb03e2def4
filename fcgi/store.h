/*
 * store.h — the Redis client of one sbx-api process (hiredis, synchronous).
 *
 * One connection per process, opened lazily on first use and again after
 * any error; a failed connect makes the next ~100 ms answer at once with
 * REDIS_UNAVAILABLE instead of trying again. On every (re)connect, and
 * every 5 s on a kept connection, the server must run with
 * maxmemory-policy noeviction, else it counts as unavailable. Every
 * failure, error replies included, is SBX_E_REDIS_UNAVAILABLE (503) with
 * the detail logged; a refused write (rerror.h: NOREPLICAS, READONLY,
 * MISCONF, OOM, …) says so in its message.
 * With redis.sentinels the connection is to the primary the sentinels
 * name (sentinel.h), checked with ROLE when it is made; a READONLY answer
 * drops it: the next call connects to the new primary.
 *
 * Pipelining: store_append() N commands, then store_collect() N replies.
 *
 * Liveness: a connection idle for 1 s or more is probed (one non-blocking
 * MSG_PEEK recv) before it is used; a busy one is not, to keep a syscall
 * off every command. When the server closed or reset a kept connection
 * anyway (a restart or CLIENT KILL while this worker was busy), a batch of
 * reads only (store_readonly_cmd) is sent once more on a fresh connection;
 * any other batch fails with REDIS_UNAVAILABLE as before (a write might
 * have been applied, so it is never sent twice).
 */
#ifndef SBX_STORE_H
#define SBX_STORE_H

#include "buf.h"
#include "conf.h"
#include "err.h"

#include <hiredis/hiredis.h>
#include <stddef.h>

/* Remember the address and timeouts of c; connects nothing. 0 or -1 (bad url). */
int store_init(const struct sbx_conf *c, struct sbx_err *e);

/* Close the connection (if any). */
void store_release(void);

/* Connect now, check the eviction policy, disconnect (the master's start
 * check). 0 ok; -1 unreachable; -2 reachable but evicting (e says which). */
int store_probe(struct sbx_err *e);

/* Queue a command (hiredis format: %s, %b, %lld). The first append of a
 * batch connects if needed. 0 or -1 (the batch is dropped). */
int store_append(struct sbx_err *e, const char *fmt, ...);
int store_append_argv(struct sbx_err *e, int argc, const char **argv, const size_t *argvlen);
/* The command argv[0..argc) in RESP into b (reset first), as hiredis'
 * redisFormatCommandArgv makes it, without a printf per argument (the
 * hot path's formatter). 0, or -1 when b's bound was reached or argc < 1. */
int store_format_argv(struct buf *b, int argc, const char **argv, const size_t *argvlen);

enum store_flags {
	STORE_RAW_ERRORS = 1 << 0,  /* hand error replies back instead of failing */
};

/* Read the replies of all n queued commands into replies[0..n) (new
 * references: store_free_replies). -1 (replies all NULL) on failure. */
int store_collect(redisReply **replies, size_t n, unsigned flags, struct sbx_err *e);

/* append + collect of one command; new reply (freeReplyObject) or NULL. */
redisReply *store_command(struct sbx_err *e, const char *fmt, ...);

/* 1 when the command name (len bytes, any case) only reads, so a batch of
 * such commands may be sent twice. */
int store_readonly_cmd(const char *cmd, size_t len);

/* on: the next batch begun may be sent twice whatever its commands (what
 * they write tolerates being applied twice, like a rate limit's count): it
 * is resent on a fresh connection like a batch of reads. Call with 0 right
 * after, so that nothing else inherits it. */
void store_next_batch_resendable(int on);

void store_free_replies(redisReply **replies, size_t n);
void store_replyp(redisReply **r);
#define auto_reply __attribute__((cleanup(store_replyp)))

/* Look a field up in an HGETALL reply; borrowed, NULL when absent. */
const char *store_hash_get(const redisReply *hgetall, const char *field);

#endif
