/* Unit tests of the pure rules of agent_watch.c (patterns) and agent_git.c
 * (URL, branch, the mapping of git's stderr to codes, redaction). */
#include "unit.h"
#include "agent_git.h"
#include "agent_watch.h"

static int url(const char *s, struct git_url *u)
{
	struct sbx_err e;
	return git_url_parse(s, strlen(s), u, &e);
}

static enum sbx_ecode git_code(const char *stderr_text, const struct git_url *u, char *msg,
			       size_t n)
{
	struct sbx_err e;

	git_error(stderr_text, strlen(stderr_text), 0, 0, u, &e);
	snprintf(msg, n, "%s", e.msg);
	return e.code;
}

TEST(watch_patterns_split_and_match)
{
	char pat[WATCH_PATTERNS_MAX][256];
	char many[WATCH_PATTERNS_MAX * 3 + 8] = "";
	struct sbx_err e;

	CHECK_INT(watch_patterns("node_modules,,*.log", "exclude", pat, &e), 2);
	CHECK_INT(watch_match((const char (*)[256])pat, 2, "node_modules"), 1);
	CHECK_INT(watch_match((const char (*)[256])pat, 2, "a.log"), 1);
	CHECK_INT(watch_match((const char (*)[256])pat, 2, "a.txt"), 0);
	/* FNM_PERIOD: "*" does not hide dot files unless named */
	CHECK_INT(watch_match((const char (*)[256])pat, 2, ".log"), 0);
	CHECK_INT(watch_patterns(NULL, "exclude", pat, &e), 0);
	CHECK_INT(watch_patterns("a/b", "exclude", pat, &e), -1);
	CHECK_INT(e.code, SBX_E_VALIDATION);
	for (int i = 0; i <= WATCH_PATTERNS_MAX; i++)
		memcpy(many + 2 * i, "p,", 3);
	CHECK_INT(watch_patterns(many, "exclude", pat, &e), -1);
}

TEST(git_url_schemes_and_redaction)
{
	struct git_url u;

	CHECK_INT(url("https://github.com/a/b.git", &u), 0);
	CHECK_STR(u.redacted, "https://github.com/a/b.git");
	CHECK_STR(u.name, "b");
	CHECK_INT(u.creds, 0);
	CHECK_INT(url("https://user:t0ken@host.example/x/repo/", &u), 0);
	CHECK_STR(u.redacted, "https://***@host.example/x/repo/");
	CHECK_STR(u.name, "repo");
	CHECK_INT(u.creds, 1);
	CHECK_INT(url("https://t0k@en@host/r", &u), 0);   /* the last '@' ends the userinfo */
	CHECK_STR(u.redacted, "https://***@host/r");
	CHECK_INT(url("file:///tmp/r.git", &u), 0);
	CHECK_STR(u.name, "r");
	CHECK_INT(url("git://127.0.0.1:9418/", &u), 0);
	CHECK_STR(u.name, "repo");
	CHECK_INT(url("ssh://git@host/p/q.git", &u), 0);
	CHECK_STR(u.redacted, "ssh://***@host/p/q.git");
	CHECK_INT(url("ftp://host/r", &u), -1);
	CHECK_INT(url("ext::sh -c id", &u), -1);
	CHECK_INT(url("-uhttps://x/y", &u), -1);
	CHECK_INT(url("git@host:p/q.git", &u), -1);
	CHECK_INT(url("file://host/r", &u), -1);
	CHECK_INT(url("https://", &u), -1);
	CHECK_INT(url("https://user@/r", &u), -1);
	CHECK_INT(url("https://h/a b", &u), -1);
	CHECK_INT(url("https://h/a\nb", &u), -1);
	CHECK_INT(url("", &u), -1);
}

TEST(git_branch_rules)
{
	struct sbx_err e;

	CHECK_INT(git_branch_check("main", 4, &e), 0);
	CHECK_INT(git_branch_check("feature/x-1.2", 13, &e), 0);
	CHECK_INT(git_branch_check("-b", 2, &e), -1);
	CHECK_INT(git_branch_check("a..b", 4, &e), -1);
	CHECK_INT(git_branch_check("a/", 2, &e), -1);
	CHECK_INT(git_branch_check("x.lock", 6, &e), -1);
	CHECK_INT(git_branch_check("a b", 3, &e), -1);
	CHECK_INT(git_branch_check("a@{1}", 5, &e), -1);
	CHECK_INT(git_branch_check("", 0, &e), -1);
}

TEST(git_errors_map_to_codes_and_never_quote_credentials)
{
	struct git_url plain, secret;
	char msg[256];

	CHECK_INT(url("https://h/r.git", &plain), 0);
	CHECK_INT(url("https://u:s3cr3t@h/r.git", &secret), 0);
	CHECK_INT(git_code("warning: x\nfatal: Remote branch nope not found in upstream origin\n",
			   &plain, msg, sizeof(msg)), SBX_E_GIT_BRANCH_NOT_FOUND);
	CHECK(strstr(msg, "Remote branch nope") != NULL);
	CHECK_INT(git_code("fatal: could not read Username for 'https://h': terminal prompts disabled\n",
			   &plain, msg, sizeof(msg)), SBX_E_GIT_AUTH_FAILED);
	CHECK_INT(git_code("remote: Repository not found.\nfatal: repository 'https://h/r.git/' not found\n",
			   &plain, msg, sizeof(msg)), SBX_E_GIT_REPOSITORY_NOT_FOUND);
	CHECK_INT(git_code("fatal: '/x' does not appear to be a git repository\n", &plain, msg,
			   sizeof(msg)), SBX_E_GIT_REPOSITORY_NOT_FOUND);
	CHECK_INT(git_code("fatal: unable to access 'https://h/r.git/': Could not resolve host: h\n",
			   &plain, msg, sizeof(msg)), SBX_E_GIT_NETWORK_ERROR);
	CHECK_INT(git_code("fatal: destination path 'r' already exists and is not an empty directory.\n",
			   &plain, msg, sizeof(msg)), SBX_E_FILE_EXISTS);
	CHECK_INT(git_code("something new\n", &plain, msg, sizeof(msg)), SBX_E_GIT_CLONE_FAILED);
	CHECK_INT(git_code("sh: 1: git: not found\n", &plain, msg, sizeof(msg)), SBX_E_GIT_CLONE_FAILED);
	CHECK(strstr(msg, "not installed") != NULL);
	/* a URL with credentials: git's words are not quoted, the URL is redacted */
	CHECK_INT(git_code("fatal: Authentication failed for 'https://u:s3cr3t@h/r.git/'\n", &secret,
			   msg, sizeof(msg)), SBX_E_GIT_AUTH_FAILED);
	CHECK(strstr(msg, "s3cr3t") == NULL);
	CHECK(strstr(msg, "https://***@h/r.git") != NULL);
	{
		struct sbx_err e;

		git_error("", 0, 1, 0, &secret, &e);
		CHECK_INT(e.code, SBX_E_GIT_TIMEOUT);
		CHECK(strstr(e.msg, "s3cr3t") == NULL);
	}
}
