/* SPDX-License-Identifier: MIT */
/*
 * fuzz_config - configuration values: tf_config_check for every variable
 * of the table in src/util/config_int.h, and tf__config_parse_size.
 *
 * Input layout: byte 0 selects the variable (modulo the number of
 * variables plus one; the extra value takes the name from the input too,
 * up to the first NUL, to fuzz the name lookup); the rest is the value
 * text (a NUL ends it early, as it would in the environment).
 *
 * Checked: results are 0, -EINVAL or (unknown name) -ENOENT; a SIZE
 * variable accepts exactly what tf__config_parse_size accepts; an accepted
 * UINT is decimal digits only; an accepted STR fits its field.
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "config_int.h"
#include "fuzz_common.h"

enum var_type { T_STR, T_UINT, T_SIZE, T_BOOL, T_LOGLEVEL };

static const struct {
	const char *name;
	enum var_type type;
	const char *deflt;
} vars[] = {
/* Variables of a component other than core carry its name (config.c). */
#define XX(_comp, _NAME, _field, _type, _def, _help)         \
	{(#_comp[0] == 'c') ? "TOLLFREE_" #_NAME             \
			    : "TOLLFREE_" #_comp "_" #_NAME, \
	 T_##_type, _def},
	TF_CONFIG_VARS(XX)
#undef XX
};
#define N_VARS (sizeof(vars) / sizeof(vars[0]))

/* The names as tf_config_foreach lists them (upper case). */
static char names[N_VARS][64];

static void check_listed(const char *name, const char *deflt, const char *value,
			 const char *component, const char *help, void *arg)
{
	size_t *n = arg;

	(void)value;
	(void)component;
	(void)help;
	/* The table's names are matched without regard to case. */
	FUZZ_CHECK(*n < N_VARS && !strcasecmp(name, vars[*n].name) &&
		   !strcmp(deflt, vars[*n].deflt) &&
		   strlen(name) < sizeof(names[0]));
	memcpy(names[*n], name, strlen(name) + 1);
	(*n)++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	size_t n = 0;

	(void)argc;
	(void)argv;
	fuzz_quiet();
	/* The public listing and the table agree, and every default passes
	 * its own check. */
	tf_config_foreach(check_listed, &n);
	FUZZ_CHECK(n == N_VARS);
	for (size_t i = 0; i < N_VARS; i++)
		FUZZ_CHECK(tf_config_check(names[i], vars[i].deflt) == 0);
	return 0;
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char buf[512];
	const char *name, *value;
	size_t i, len;
	uint64_t sz;
	int ret, sret;

	if (size < 1 || size > sizeof(buf))
		return 0;
	i = data[0] % (N_VARS + 1);
	len = size - 1;
	memcpy(buf, data + 1, len);
	buf[len] = '\0';
	if (i < N_VARS) {
		/* Half the inputs use the short name (no prefix). */
		name = names[i] + ((data[0] & 0x80) ? 9 : 0);
		value = buf;
	} else {
		/* name NUL value */
		name = buf;
		value = buf + strlen(buf);
		if (value < buf + len)
			value++;
	}
	ret = tf_config_check(name, value);
	sret = tf__config_parse_size(value, &sz);
	FUZZ_CHECK(sret == 0 || sret == -EINVAL);
	if (i == N_VARS) {
		FUZZ_CHECK(ret == 0 || ret == -EINVAL || ret == -ENOENT);
		return 0;
	}
	FUZZ_CHECK(ret == 0 || ret == -EINVAL);
	switch (vars[i].type) {
	case T_SIZE:
		FUZZ_CHECK((ret == 0) == (sret == 0));
		break;
	case T_UINT:
		FUZZ_CHECK(ret != 0 || all_digits(value));
		break;
	case T_STR:
		FUZZ_CHECK(ret != 0 || strlen(value) < TF_CONFIG_STR_MAX);
		break;
	default:
		break;
	}
	return 0;
}
