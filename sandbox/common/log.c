#include "log.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char component[32] = "sbx";
static enum log_level min_level = LOG_INFO;

void log_init(const char *name, enum log_level min)
{
	snprintf(component, sizeof(component), "%s", name);
	min_level = min;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const char *names[] = { "debug", "info", "warn", "error" };
	char line[1024], ts[32];
	va_list ap;
	int n;

	if (lvl < min_level)
		return;
	util_iso8601(util_wall_ms(), ts);
	n = snprintf(line, sizeof(line), "%s %s %s[%d]: ", ts, names[lvl], component, (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(line))
		return;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	n = (int)strlen(line);
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)util_write_all(STDERR_FILENO, line, (size_t)n);
}
