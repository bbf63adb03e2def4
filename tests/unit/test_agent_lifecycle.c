/* Unit tests of the agent's lifecycle decisions (agent_lifecycle.c). */
#include "agent.h"
#include "agent_lifecycle.h"
#include "unit.h"

TEST(agent_lc_decide_record_gone_or_moved)
{
	CHECK_INT(agent_lc_decide("n1", 10, 1, NULL, -1, NULL), AGENT_LC_DESTROY);
	CHECK_INT(agent_lc_decide("n1", 10, 0, NULL, -1, NULL), AGENT_LC_DESTROY);
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n2", 20, "running"), AGENT_LC_DESTROY);
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n2", 20, "starting"), AGENT_LC_DESTROY);
	/* Another node, even at an epoch not above ours: not ours. */
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n2", 10, "running"), AGENT_LC_DESTROY);
	CHECK_INT(agent_lc_decide("n1", 10, 1, NULL, 10, "running"), AGENT_LC_DESTROY);
	/* Names are compared whole. */
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n10", 10, "running"), AGENT_LC_DESTROY);
}

TEST(agent_lc_decide_newer_epoch_on_this_node)
{
	/* A wake meant for us: keep, but refuse the old epoch from now on. */
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n1", 20, "starting"), AGENT_LC_RAISE_FENCE);
	CHECK_INT(agent_lc_decide("n1", 10, 0, "n1", 20, "starting"), AGENT_LC_RAISE_FENCE);
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n1", 20, "running"), AGENT_LC_DESTROY_CAS);
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n1", 20, "sleeping"), AGENT_LC_DESTROY);
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n1", 20, NULL), AGENT_LC_DESTROY);
}

TEST(agent_lc_decide_same_epoch)
{
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n1", 10, "running"), AGENT_LC_KEEP);
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n1", 10, "starting"), AGENT_LC_KEEP);
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n1", 10, "sleeping"), AGENT_LC_STOP);
	CHECK_INT(agent_lc_decide("n1", 10, 0, "n1", 10, "sleeping"), AGENT_LC_KEEP);
	CHECK_INT(agent_lc_decide("n1", 10, 0, "n1", 10, "running"), AGENT_LC_REPORT);
	CHECK_INT(agent_lc_decide("n1", 10, 0, "n1", 10, "starting"), AGENT_LC_KEEP);
	/* A sleeping record older than what we were told is left alone ... */
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n1", 5, "sleeping"), AGENT_LC_KEEP);
	/* ... but one that claims to run lost writes (a Redis failover): reset it,
	 * or every data call would be refused as STALE_EPOCH forever. */
	CHECK_INT(agent_lc_decide("n1", 10, 1, "n1", 5, "running"), AGENT_LC_RESET);
	CHECK_INT(agent_lc_decide("n1", 10, 0, "n1", 5, "starting"), AGENT_LC_RESET);
}

TEST(agent_lc_streams_count_per_container)
{
	struct agent a = { 0 };
	struct agent_sb sb = { 0 };
	struct agent_stream s1 = { 0 }, s2 = { 0 };

	snprintf(sb.key, sizeof(sb.key), "dev.box");
	sb.rt = (struct rt_sandbox *)&sb; /* never dereferenced: only "running" */
	sb.run = 1;
	a.sandboxes = &sb;
	agent_sb_stream_begin(&sb, &s1);
	agent_sb_stream_begin(&sb, &s1); /* twice on one handle counts once */
	agent_sb_stream_begin(&sb, &s2);
	CHECK_INT(sb.streams, 2);
	agent_sb_stream_end(&a, &s1);
	agent_sb_stream_end(&a, &s1); /* idempotent */
	CHECK_INT(sb.streams, 1);
	/* A new container (run 2): the old stream's end does not count. */
	sb.run = 2;
	sb.streams = 0;
	agent_sb_stream_end(&a, &s2);
	CHECK_INT(sb.streams, 0);
	/* The entry is gone: end is harmless. */
	agent_sb_stream_begin(&sb, &s1);
	a.sandboxes = NULL;
	agent_sb_stream_end(&a, &s1);
	CHECK_INT(s1.active, 0);
}

TEST(agent_fence_prune_forgets_only_old_fences_of_gone_sandboxes)
{
	struct agent a = { 0 };
	struct agent_sb sb = { 0 };
	struct sbx_err e;
	int64_t now;

	snprintf(sb.key, sizeof(sb.key), "dev.here");
	a.sandboxes = &sb;
	CHECK_INT(agent_fence(&a, "dev.here", 5, &e), 0);
	CHECK_INT(agent_fence(&a, "dev.gone", 7, &e), 0);
	CHECK_INT(agent_fence(&a, "dev.recent", 9, &e), 0);
	now = a.fences->touched_ms;
	for (struct agent_fence *f = a.fences; f; f = f->next)
		if (strcmp(f->key, "dev.recent") != 0)
			f->touched_ms = now - AGENT_FENCE_KEEP_MS - 1;
	agent_fence_prune(&a, now);
	/* The gone sandbox's old fence is forgotten: any epoch is accepted again. */
	CHECK_INT(agent_fence(&a, "dev.gone", 1, &e), 0);
	/* A sandbox still here keeps its fence however old; a recent one too. */
	CHECK_INT(agent_fence(&a, "dev.here", 4, &e), -1);
	CHECK_INT(e.code, SBX_E_STALE_EPOCH);
	CHECK_INT(agent_fence(&a, "dev.recent", 8, &e), -1);
	while (a.fences) {
		struct agent_fence *f = a.fences;
		a.fences = f->next;
		free(f);
	}
}

/* The sandbox table's index by key finds every linked sandbox and none
 * unlinked, across the table's growth. */
TEST(agent_sb_index_finds_linked_sandboxes)
{
	enum { N = 1500 };
	struct agent a = { 0 };
	struct agent_sb *sbs = calloc(N, sizeof(*sbs));
	size_t listed = 0;

	CHECK(sbs != NULL);
	for (int i = 0; i < N; i++) {
		snprintf(sbs[i].key, sizeof(sbs[i].key), "t%d.box-%d", i % 7, i);
		CHECK_INT(agent_sb_link(&a, &sbs[i]), 0);
	}
	for (int i = 0; i < N; i++)
		CHECK(agent_sb_find(&a, sbs[i].key) == &sbs[i]);
	CHECK(agent_sb_find(&a, "t0.nothing") == NULL);
	for (int i = 0; i < N; i += 2)
		agent_sb_unlink(&a, &sbs[i]);
	for (int i = 0; i < N; i++)
		CHECK(agent_sb_find(&a, sbs[i].key) == (i % 2 ? &sbs[i] : NULL));
	for (struct agent_sb *sb = a.sandboxes; sb; sb = sb->next)
		listed++;
	CHECK_INT(listed, N / 2);
	CHECK_INT(a.by_key.n, N / 2);
	keyidx_free(&a.by_key);
	free(sbs);
}

static unsigned occupied_by_walk(const struct agent *a, size_t *listed)
{
	unsigned n = 0;

	*listed = 0;
	for (const struct agent_sb *sb = a->sandboxes; sb; sb = sb->next) {
		n += sb->rt != NULL || sb->build != NULL;
		(*listed)++;
	}
	return n;
}

/* The count a start checks the capacity against (agent.noccupied) stays
 * what a walk of the table counts, through links, unlinks (the head, the
 * tail, the middle, twice) and containers and builds set and cleared. */
TEST(agent_sb_occupied_count_matches_the_table)
{
	enum { N = 40 };
	struct agent a = { 0 };
	struct agent_sb *sbs = calloc(N, sizeof(*sbs));
	size_t listed;

	CHECK(sbs != NULL);
	for (int i = 0; i < N; i++) {
		snprintf(sbs[i].key, sizeof(sbs[i].key), "dev.occ-%d", i);
		/* never dereferenced: only "has a container" / "is being built" */
		if (i % 3 == 0)
			sbs[i].rt = (struct rt_sandbox *)&sbs[i];
		if (i % 5 == 0)
			sbs[i].build = (struct agent_build *)&sbs[i];
		CHECK_INT(agent_sb_link(&a, &sbs[i]), 0);
	}
	CHECK_INT(a.noccupied, occupied_by_walk(&a, &listed));
	CHECK_INT(a.noccupied, 19);   /* 14 multiples of 3, 8 of 5, 3 of both */
	agent_sb_unlink(&a, &sbs[N - 1]);   /* the head */
	agent_sb_unlink(&a, &sbs[0]);       /* the tail, occupied */
	agent_sb_unlink(&a, &sbs[15]);      /* the middle, occupied */
	agent_sb_unlink(&a, &sbs[15]);      /* again: nothing */
	CHECK_INT(a.noccupied, occupied_by_walk(&a, &listed));
	CHECK_INT(listed, N - 3);
	CHECK_INT(a.by_key.n, N - 3);
	for (int i = 1; i < N - 1; i++) {
		if (i == 15)
			continue;
		sbs[i].rt = i % 2 ? (struct rt_sandbox *)&sbs[i] : NULL;
		sbs[i].build = NULL;
		agent_sb_recount(&a, &sbs[i]);
	}
	CHECK_INT(a.noccupied, occupied_by_walk(&a, &listed));
	/* a change while unlinked counts once it is linked again */
	sbs[0].rt = NULL;
	sbs[0].build = (struct agent_build *)&sbs[0];
	agent_sb_recount(&a, &sbs[0]);
	CHECK_INT(a.noccupied, occupied_by_walk(&a, &listed));
	CHECK_INT(agent_sb_link(&a, &sbs[0]), 0);
	CHECK_INT(a.noccupied, occupied_by_walk(&a, &listed));
	while (a.sandboxes)
		agent_sb_unlink(&a, a.sandboxes);
	CHECK_INT(a.noccupied, 0);
	CHECK_INT(a.by_key.n, 0);
	keyidx_free(&a.by_key);
	free(sbs);
}
