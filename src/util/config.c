/* SPDX-License-Identifier: MIT */
/*
 * config.c - parse the TOLLFREE_* table (config_int.h).  The environment is
 * read exactly once; every context starts from a copy of that snapshot.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

enum cfg_type { CFG_STR, CFG_UINT, CFG_SIZE, CFG_BOOL, CFG_LOGLEVEL };

struct cfg_var {
	const char *component;
	const char *name; /* without the TOLLFREE_ prefix */
	enum cfg_type type;
	const char *deflt;
	const char *help;
	size_t offset;
	size_t size;
	bool secret; /* never logged or printed */
};

static const struct cfg_var cfg_table[] = {
#define TF__CFG_ROW(_comp, _NAME, _field, _type, _def, _help) \
	{#_comp,                                              \
	 (#_comp[0] == 'c') ? #_NAME : #_comp "_" #_NAME,     \
	 CFG_##_type,                                         \
	 _def,                                                \
	 _help,                                               \
	 offsetof(struct tf_config, _field),                  \
	 sizeof(((struct tf_config *)0)->_field),             \
	 sizeof(#_NAME) == 4 && #_NAME[0] == 'P' && #_NAME[1] == 'S'},
	TF_CONFIG_VARS(TF__CFG_ROW)
#undef TF__CFG_ROW
};
#define CFG_N (sizeof(cfg_table) / sizeof(cfg_table[0]))

static const char *const log_level_names[] = {"error", "warn", "info", "debug",
					      "trace"};

static struct tf_config env_cfg;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static char upper_name[CFG_N][64];
/* What the environment said, and which values did not parse. */
static const char *env_val[CFG_N];
static bool env_invalid[CFG_N];
static pthread_once_t report_once = PTHREAD_ONCE_INIT;

int tf__config_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	while (isspace((unsigned char)*s))
		s++;
	if (!strcasecmp(s, "inf") || !strcasecmp(s, "infinity")) {
		*out = TF_CONFIG_SIZE_INF;
		return 0;
	}
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		mult = 1ull << 10;
		end++;
		break;
	case 'M':
		mult = 1ull << 20;
		end++;
		break;
	case 'G':
		mult = 1ull << 30;
		end++;
		break;
	case 'T':
		mult = 1ull << 40;
		end++;
		break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	if (v > UINT64_MAX / mult)
		return -EINVAL;
	*out = v * mult;
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"y", "yes", "1", "on", "true"};
	static const char *const no[] = {"n", "no", "0", "off", "false"};

	for (size_t i = 0; i < 5; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

static int parse_var(const struct cfg_var *v, const char *s, void *dst)
{
	uint64_t u;
	char *end;
	bool b;

	switch (v->type) {
	case CFG_STR:
		if (strlen(s) >= v->size)
			return -EINVAL;
		memcpy(dst, s, strlen(s) + 1);
		return 0;
	case CFG_UINT:
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		errno = 0;
		u = strtoull(s, &end, 10);
		if (errno || *end || u > UINT32_MAX)
			return -EINVAL;
		*(uint64_t *)dst = u;
		return 0;
	case CFG_SIZE:
		if (tf__config_parse_size(s, &u))
			return -EINVAL;
		*(uint64_t *)dst = u;
		return 0;
	case CFG_BOOL:
		if (parse_bool(s, &b))
			return -EINVAL;
		*(bool *)dst = b;
		return 0;
	case CFG_LOGLEVEL:
		for (int i = 0; i < 5; i++) {
			if (!strcasecmp(s, log_level_names[i])) {
				*(int *)dst = i;
				return 0;
			}
		}
		return -EINVAL;
	}
	return -EINVAL;
}

static void format_var(const struct cfg_var *v, const struct tf_config *cfg,
		       char *buf, size_t len)
{
	const void *src = (const char *)cfg + v->offset;
	uint64_t u;

	/* A secret is never shown, only whether it is set. */
	if (v->secret) {
		snprintf(buf, len, "%s", *(const char *)src ? "(set)" : "");
		return;
	}
	switch (v->type) {
	case CFG_STR:
		snprintf(buf, len, "%s", (const char *)src);
		break;
	case CFG_UINT:
		snprintf(buf, len, "%" PRIu64, *(const uint64_t *)src);
		break;
	case CFG_SIZE:
		u = *(const uint64_t *)src;
		if (u == TF_CONFIG_SIZE_INF)
			snprintf(buf, len, "inf");
		else if (u && !(u % (1ull << 30)))
			snprintf(buf, len, "%" PRIu64 "G", u >> 30);
		else if (u && !(u % (1ull << 20)))
			snprintf(buf, len, "%" PRIu64 "M", u >> 20);
		else if (u && !(u % (1ull << 10)))
			snprintf(buf, len, "%" PRIu64 "K", u >> 10);
		else
			snprintf(buf, len, "%" PRIu64, u);
		break;
	case CFG_BOOL:
		snprintf(buf, len, "%s", *(const bool *)src ? "y" : "n");
		break;
	case CFG_LOGLEVEL:
		snprintf(buf, len, "%s", log_level_names[*(const int *)src]);
		break;
	}
}

static const struct cfg_var *find_var(const char *name, size_t *idx)
{
	if (!strncmp(name, "TOLLFREE_", 9))
		name += 9;
	for (size_t i = 0; i < CFG_N; i++) {
		if (!strcasecmp(cfg_table[i].name, name)) {
			if (idx)
				*idx = i;
			return &cfg_table[i];
		}
	}
	return NULL;
}

static void env_init(void)
{
	for (size_t i = 0; i < CFG_N; i++) {
		const struct cfg_var *v = &cfg_table[i];
		char *dst = (char *)&env_cfg + v->offset;
		size_t j;

		snprintf(upper_name[i], sizeof(upper_name[i]), "TOLLFREE_%s",
			 v->name);
		for (j = 0; upper_name[i][j]; j++)
			upper_name[i][j] =
				(char)toupper((unsigned char)upper_name[i][j]);
		/* Defaults are compile-time constants and must parse. */
		if (parse_var(v, v->deflt, dst))
			abort();
		env_val[i] = getenv(upper_name[i]);
		if (env_val[i] && parse_var(v, env_val[i], dst)) {
			parse_var(v, v->deflt, dst);
			env_invalid[i] = true;
		}
	}
	/* The log never reads the configuration (it would re-enter this
	 * once-routine); it is told the level instead. */
	tf__log_set_config_level(env_cfg.log_level);
	tf__log_set_config_rate((unsigned)env_cfg.log_rate);
}

/* Log each invalid value once, after the once-routine: a secret's value
 * is never written. */
static void env_report(void)
{
	for (size_t i = 0; i < CFG_N; i++) {
		if (!env_invalid[i])
			continue;
		if (cfg_table[i].secret)
			tf__log(TF_LOG_WARN, "config",
				"%s (%zu bytes) is not a valid value",
				upper_name[i], strlen(env_val[i]));
		else
			tf__log(TF_LOG_WARN, "config",
				"%s='%s' is not a valid value, using '%s'",
				upper_name[i], env_val[i], cfg_table[i].deflt);
	}
}

static void env_load(void)
{
	pthread_once(&env_once, env_init);
	pthread_once(&report_once, env_report);
}

void tf__config_get(struct tf_config *cfg)
{
	env_load();
	*cfg = env_cfg;
}

bool tf__config_env_invalid(const char *name)
{
	size_t i;

	env_load();
	return find_var(name, &i) && env_invalid[i];
}

int tf__config_set(struct tf_config *cfg, const char *name, const char *value)
{
	const struct cfg_var *v = find_var(name, NULL);

	if (!v)
		return -ENOENT;
	if (!value)
		return -EINVAL;
	return parse_var(v, value, (char *)cfg + v->offset);
}

int tf_config_foreach(tf_config_var_fn_t fn, void *arg)
{
	char buf[TF_CONFIG_STR_MAX + 32];

	env_load();
	for (size_t i = 0; i < CFG_N; i++) {
		format_var(&cfg_table[i], &env_cfg, buf, sizeof(buf));
		if (fn)
			fn(upper_name[i], cfg_table[i].deflt, buf,
			   cfg_table[i].component, cfg_table[i].help, arg);
	}
	return (int)CFG_N;
}

int tf_config_get(const char *name, char *buf, size_t len)
{
	char tmp[TF_CONFIG_STR_MAX + 32];
	const struct cfg_var *v;
	size_t n;

	if (!name || (!buf && len))
		return -EINVAL;
	env_load();
	v = find_var(name, NULL);
	if (!v)
		return -ENOENT;
	format_var(v, &env_cfg, tmp, sizeof(tmp));
	n = strlen(tmp);
	if (n >= len)
		return -ENOSPC;
	memcpy(buf, tmp, n + 1);
	return (int)n;
}

int tf_config_check(const char *name, const char *value)
{
	struct tf_config scratch;
	const struct cfg_var *v;

	if (!name || !value)
		return -EINVAL;
	v = find_var(name, NULL);
	if (!v)
		return -ENOENT;
	return parse_var(v, value, (char *)&scratch + v->offset);
}
