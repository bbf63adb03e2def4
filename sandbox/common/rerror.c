#include "rerror.h"
#include "util.h"

#include <string.h>

int rerror_unavailable(const char *str)
{
	static const char *const codes[] = {
		"NOREPLICAS", "READONLY", "MISCONF", "OOM", "LOADING", "BUSY",
		"MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
	};
	size_t n;

	if (!str)
		return 0;
	n = strcspn(str, " ");
	for (size_t i = 0; i < ARRAY_SIZE(codes); i++)
		if (strlen(codes[i]) == n && strncmp(str, codes[i], n) == 0)
			return 1;
	return 0;
}
