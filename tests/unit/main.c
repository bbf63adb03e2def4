/* The unit-test runner: runs every registered TEST, prints a closing line. */
#include "unit.h"

#include <stdlib.h>

static struct unit_test *head;

void unit_register(struct unit_test *t)
{
	t->next = head;
	head = t;
}

int main(int argc, char **argv)
{
	int passed = 0, failed = 0;
	struct unit_test *rev = NULL;

	while (head) { /* registration order is reversed: restore file order */
		struct unit_test *n = head->next;
		head->next = rev;
		rev = head;
		head = n;
	}
	for (struct unit_test *t = rev; t; t = t->next) {
		int f = 0;

		if (argc > 1 && !strstr(t->name, argv[1]))
			continue;
		t->fn(&f);
		if (f) {
			fprintf(stderr, "FAIL %s\n", t->name);
			failed++;
		} else {
			passed++;
		}
	}
	printf("unit: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
