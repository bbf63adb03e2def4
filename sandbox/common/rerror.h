/*
 * rerror.h — what an error reply of Redis means for sbx (both tiers).
 *
 * Redis refuses a write while it cannot take one: NOREPLICAS (fewer good
 * replicas than min-replicas-to-write), READONLY (a replica, e.g. an old
 * primary after a failover), MISCONF (a failed save with
 * stop-writes-on-bgsave-error), OOM (maxmemory reached under noeviction),
 * and the transient LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN. Such
 * a reply is Redis being unavailable (503 REDIS_UNAVAILABLE with
 * Retry-After; an agent's lease is not renewed), never a bug of ours — also
 * when it comes back from inside a script ("NOREPLICAS … script: <sha>").
 */
#ifndef SBX_RERROR_H
#define SBX_RERROR_H

/* 1 when the error reply text str (its first word is the code) says Redis
 * cannot serve right now, 0 for any other error (a bad command or script). */
int rerror_unavailable(const char *str);

#endif
