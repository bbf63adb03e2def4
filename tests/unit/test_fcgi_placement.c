/* Placement: live nodes with room only, two random choices, less loaded wins. */
#include "unit.h"
#include "placement.h"

static struct placement_node node(const char *name, int alive, int64_t cap, int64_t running,
				  int64_t load)
{
	struct placement_node n = { .alive = alive, .capacity = cap, .running = running, .load = load };

	snprintf(n.name, sizeof(n.name), "%s", name);
	snprintf(n.address, sizeof(n.address), "127.0.0.1:7070");
	return n;
}

TEST(fcgi_placement_none_with_room)
{
	struct placement_node ns[3] = {
		node("a", 0, 10, 0, 0),     /* down */
		node("b", 1, 10, 10, 0),    /* full */
		node("c", 1, 10, 0, 0),
	};

	CHECK_INT(placement_choose(ns, 0, 1, 2), -1);
	CHECK_INT(placement_choose(ns, 2, 1, 2), -1);
	ns[2].address[0] = '\0';    /* no address: not usable */
	CHECK_INT(placement_choose(ns, 3, 1, 2), -1);
	CHECK_INT(placement_has_room(&ns[1]), 0);
}

TEST(fcgi_placement_single_candidate)
{
	struct placement_node ns[3] = {
		node("a", 0, 10, 0, 0),
		node("b", 1, 10, 3, 50),
		node("c", 1, 10, 10, 0),
	};

	for (uint32_t r = 0; r < 10; r++)
		CHECK_INT(placement_choose(ns, 3, r, r * 7), 1);
}

TEST(fcgi_placement_two_choices_take_less_loaded)
{
	struct placement_node ns[2] = {
		node("a", 1, 10, 1, 5),
		node("b", 1, 10, 1, 2),
	};

	/* With two candidates both are always compared: b wins every time. */
	for (uint32_t r1 = 0; r1 < 4; r1++)
		for (uint32_t r2 = 0; r2 < 4; r2++)
			CHECK_INT(placement_choose(ns, 2, r1, r2), 1);
	/* Equal load: the first choice wins, so both nodes get picked. */
	ns[1].load = 5;
	CHECK_INT(placement_choose(ns, 2, 0, 0), 0);
	CHECK_INT(placement_choose(ns, 2, 1, 0), 1);
}

TEST(fcgi_placement_two_distinct_choices)
{
	struct placement_node ns[4] = {
		node("a", 1, 10, 0, 9),
		node("b", 1, 10, 0, 1),
		node("c", 1, 10, 0, 5),
		node("d", 0, 10, 0, 0),
	};
	int seen[4] = { 0 };

	for (uint32_t r1 = 0; r1 < 30; r1++)
		for (uint32_t r2 = 0; r2 < 30; r2++) {
			int k = placement_choose(ns, 4, r1, r2);
			CHECK(k >= 0 && k <= 2);
			if (k >= 0)
				seen[k]++;
		}
	/* The most loaded node only wins when it is... never: it is always
	 * compared with a distinct, less loaded one. */
	CHECK_INT(seen[0], 0);
	CHECK(seen[1] > 0 && seen[2] > 0);
	CHECK_INT(seen[3], 0);
}

/* A degraded node and a drained one take nothing. */
TEST(fcgi_placement_skips_degraded_and_drained)
{
	for (int drained = 0; drained < 2; drained++) {
		struct placement_node ns[2] = {
			node("n1", 1, 10, 0, 0),
			node("n2", 1, 10, 5, 5),
		};

		*(drained ? &ns[0].drained : &ns[0].degraded) = 1;
		CHECK_INT(placement_has_room(&ns[0]), 0);
		for (uint32_t r = 0; r < 8; r++)
			CHECK_INT(placement_choose(ns, 2, r, r + 1), 1);
		*(drained ? &ns[1].drained : &ns[1].degraded) = 1;
		CHECK_INT(placement_choose(ns, 2, 1, 2), -1);
	}
}

/* A node that has just answered NO_CAPACITY is passed over for the retry. */
TEST(fcgi_placement_avoids_the_node_that_refused)
{
	struct placement_node ns[2] = {
		node("a", 1, 10, 0, 0),
		node("b", 1, 10, 9, 900),
	};
	struct placement_need need = { .avoid = "a" };

	for (uint32_t r = 0; r < 10; r++)
		CHECK_INT(placement_choose_fit(ns, 2, &need, r, r * 7), 1);
	CHECK_INT(placement_fits(&ns[0], &need), 0);
	need.avoid = NULL;
	CHECK_INT(placement_fits(&ns[0], &need), 1);
}
