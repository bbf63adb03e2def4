#include "agentc.h"
#include "buf.h"
#include "jsonv.h"
#include "log.h"
#include "util.h"

#include <curl/curl.h>
#include <string.h>
#include <sys/socket.h>

#define REPLY_MAX (4 << 20)

static struct {
	CURL *h;
	int64_t timeout_ms;
	int64_t pull_timeout_ms;       /* [images] pull_timeout */
	char secret_header[CONF_STR_MAX + 32];
	char request_id_header[160];   /* "X-Request-Id: …" of the current request, or "" */
	int ready;
} ac;

int64_t agentc_pull_timeout_ms(const char *image)
{
	/* a local image (a bare name, "default") never waits for a pull */
	if (!image || !strpbrk(image, ":/@") || ac.pull_timeout_ms < ac.timeout_ms)
		return ac.timeout_ms;
	return ac.pull_timeout_ms;
}

void agentc_set_request_id(const char *id)
{
	ac.request_id_header[0] = '\0';
	if (id && *id && strcmp(id, "-") != 0 &&
	    snprintf(ac.request_id_header, sizeof(ac.request_id_header), "X-Request-Id: %s", id) >=
		    (int)sizeof(ac.request_id_header))
		ac.request_id_header[0] = '\0';
}

int agentc_init(const struct sbx_conf *c, struct sbx_err *e)
{
	int w;

	if (!ac.ready && curl_global_init(CURL_GLOBAL_NOTHING) != CURLE_OK)
		return err_set(e, SBX_E_INTERNAL, "cannot initialise libcurl");
	ac.ready = 1;
	ac.timeout_ms = c->api.agent_timeout_ms;
	ac.pull_timeout_ms = c->images.pull_timeout_ms;
	w = snprintf(ac.secret_header, sizeof(ac.secret_header), "X-Sbx-Node-Secret: %s",
		     c->cluster.secret);
	if (w < 0 || (size_t)w >= sizeof(ac.secret_header))
		return err_set(e, SBX_E_INTERNAL, "cluster.secret is too long");
	if (!ac.h)
		ac.h = curl_easy_init();
	if (!ac.h)
		return err_set(e, SBX_E_INTERNAL, "cannot create a curl handle");
	return 0;
}

void agentc_release(void)
{
	if (ac.h)
		curl_easy_cleanup(ac.h);
	ac.h = NULL;
	if (ac.ready)
		curl_global_cleanup();
	ac.ready = 0;
}

void agentc_reply_release(struct agentc_reply *r)
{
	json_decref(r->body);
	r->body = NULL;
}

int agentc_error(const char *address, const struct agentc_reply *rep, const char *what,
		 struct sbx_err *e)
{
	json_t *err = json_object_get(rep->body, "error");
	const char *code = json_string_value(json_object_get(err, "code"));
	const char *msg = json_string_value(json_object_get(err, "message"));
	enum sbx_ecode c = code ? err_from_name(code) : SBX_E_NONE;
	long s = rep->status;
	int ours = c != SBX_E_NONE && c != SBX_E_INTERNAL && err_status(c) == s;

	if (ours && s >= 400 && s < 500 && s != 401 && s != 403 && s != 404 && s != 405)
		return err_set(e, c, "%.200s", msg ? msg : "refused by the node");
	/* an image the node could not pull: the registry's answer, relayed */
	if (ours && c >= SBX_E_IMAGE_NOT_FOUND && c <= SBX_E_IMAGE_TOO_LARGE)
		return err_set(e, c, "%.200s", msg ? msg : "image pull failed");
	if (ours && (c == SBX_E_NO_CAPACITY || c == SBX_E_NODE_UNAVAILABLE || c == SBX_E_NO_SPACE))
		return err_set(e, c, "node %s: %.150s", address, msg ? msg : "refused");
	log_warn("agent %s answered %ld %s: %.200s", address, s, code ? code : "-", msg ? msg : "");
	return err_set(e, SBX_E_NODE_UNAVAILABLE, "the node of the sandbox cannot %s", what);
}

static size_t on_data(char *p, size_t size, size_t n, void *userdata)
{
	struct buf *b = userdata;

	if (buf_add(b, p, size * n) < 0)
		return 0;   /* too large: abort the transfer */
	return size * n;
}

/* Sockets of libcurl are CLOEXEC like every other fd of ours. */
static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

int agentc_address_ok(const char *a)
{
	size_t n = strlen(a);

	if (n == 0 || n >= 128 || !strchr(a, ':'))
		return 0;
	return strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") == n;
}

int agentc_call(const char *method, const char *address, const char *path, const json_t *body,
		int64_t epoch, struct agentc_reply *out, struct sbx_err *e)
{
	return agentc_call_timeout(method, address, path, body, epoch, ac.timeout_ms, out, e);
}

int agentc_call_timeout(const char *method, const char *address, const char *path,
			const json_t *body, int64_t epoch, int64_t timeout_ms,
			struct agentc_reply *out, struct sbx_err *e)
{
	char url[512], epoch_header[64];
	auto_free char *text = NULL;
	struct curl_slist *hdrs = NULL;
	struct buf resp;
	CURLcode rc;
	int w;

	out->status = 0;
	out->body = NULL;
	if (!ac.h)
		return err_set(e, SBX_E_INTERNAL, "agent client is not initialised");
	if (!agentc_address_ok(address) || !path || path[0] != '/')
		return err_set(e, SBX_E_INTERNAL, "bad agent address or path");
	w = snprintf(url, sizeof(url), "http://%s%s", address, path);
	if (w < 0 || (size_t)w >= sizeof(url))
		return err_set(e, SBX_E_INTERNAL, "agent url is too long");
	if (body) {
		text = jsonv_dump(body);
		if (!text)
			return err_set(e, SBX_E_INTERNAL, "cannot serialize an agent request");
	}
	hdrs = curl_slist_append(hdrs, ac.secret_header);
	hdrs = curl_slist_append(hdrs, "Accept: application/json");
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (ac.request_id_header[0])
		hdrs = curl_slist_append(hdrs, ac.request_id_header);
	if (body)
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	if (epoch >= 0) {
		util_xsnprintf(epoch_header, sizeof(epoch_header), "X-Sbx-Epoch: %lld", (long long)epoch);
		hdrs = curl_slist_append(hdrs, epoch_header);
	}
	if (!hdrs)
		return err_set(e, SBX_E_INTERNAL, "out of memory building agent headers");

	buf_init(&resp, REPLY_MAX);
	curl_easy_reset(ac.h);
	curl_easy_setopt(ac.h, CURLOPT_URL, url);
	curl_easy_setopt(ac.h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(ac.h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(ac.h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(ac.h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(ac.h, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout_ms < 2000 ? timeout_ms : 2000));
	curl_easy_setopt(ac.h, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(ac.h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(ac.h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
	curl_easy_setopt(ac.h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(ac.h, CURLOPT_WRITEDATA, &resp);
	if (body) {
		curl_easy_setopt(ac.h, CURLOPT_POSTFIELDS, text);
		curl_easy_setopt(ac.h, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
	} else if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(ac.h, CURLOPT_HTTPGET, 1L);
	}
	rc = curl_easy_perform(ac.h);
	curl_slist_free_all(hdrs);
	if (rc != CURLE_OK) {
		buf_release(&resp);
		return err_set(e, SBX_E_NODE_UNAVAILABLE, "agent %s: %s %s: %s", address, method, path,
			       curl_easy_strerror(rc));
	}
	curl_easy_getinfo(ac.h, CURLINFO_RESPONSE_CODE, &out->status);
	if (resp.len) {
		json_error_t jerr;
		out->body = json_loadb(resp.data, resp.len, 0, &jerr);
		if (!out->body) {
			buf_release(&resp);
			return err_set(e, SBX_E_NODE_UNAVAILABLE, "agent %s answered %ld with a non-JSON body",
				       address, out->status);
		}
	}
	buf_release(&resp);
	return 0;
}
