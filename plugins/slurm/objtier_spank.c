/*
 * objtier's SPANK plugin: `srun --objtier[=OPTIONS]` / `sbatch --objtier[=OPTIONS]` run every
 * task of the job step under `objtier run` (or `objtier profile`) against the node's daemon.
 *
 * License: GPL-2.0-or-later. It includes Slurm's <slurm/spank.h> and is loaded into slurmstepd;
 * spank.h is GPL-2.0-or-later with an exception for OpenSSL only (no general linking
 * exception), so this file carries Slurm's own license, as plugins/emulate does QEMU's.
 *
 * OPTIONS, comma separated: priority:N, capacity:SIZE (fast capacity, e.g. 2G), placement:FILE,
 * no-migrate, profile:DIR (one profile per task, DIR/JOB.STEP.HOST.TASK.profile.json; profile
 * records what the task did and cannot be combined with the placement options).
 * plugstack.conf arguments: objtier=PATH (default /usr/bin/objtier), socket=PATH (default: the
 * service's /run/objtier/objtier.sock), exec=PATH (the task wrapper, default
 * /usr/lib/objtier/objtier-slurm-exec).
 *
 * How: SPANK cannot add words to a task's argv, so task_init swaps argv[0] for the wrapper and
 * hands it the original program and the options in OBJTIER_SLURM_* variables; the wrapper execs
 * `objtier run ... -- PROGRAM ARGS`. Every other step of Slurm's task launch (task plugins,
 * TaskProlog, environment) still happens, and any error fails the task: never a silent run
 * without objtier.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(objtier, 1);

#define OPTION_VALUE_MAX 1024

static int enabled;
static char priority[32];
static char capacity[32];
static char placement[PATH_MAX];
static char profile_dir[PATH_MAX];
static int no_migrate;

static char objtier_path[PATH_MAX] = "/usr/bin/objtier";
static char exec_path[PATH_MAX] = "/usr/lib/objtier/objtier-slurm-exec";
/* The service's socket, also for tasks of other users than root (objtier run's own default
 * would be a per-user socket and a daemon of the user's). */
static char socket_path[PATH_MAX] = "/run/objtier/objtier.sock";

static int parse_objtier(int val, const char *optarg, int remote);

/* Registered in slurm_spank_init: sbatch and salloc (allocator context) ignore a static
 * spank_options table. */
static struct spank_option objtier_option = {
	"objtier", "[OPTIONS]",
	"Run every task under objtier (node's daemon). OPTIONS, comma separated: priority:N, "
	"capacity:SIZE, placement:FILE, no-migrate, profile:DIR (one profile per task)",
	2, 0, parse_objtier};

static int copy_value(char *dst, size_t size, const char *key, const char *value)
{
	if (!*value) {
		slurm_error("objtier: --objtier option %s: needs a value (%s:VALUE)", key, key);
		return -1;
	}
	if (strlen(value) >= size) {
		slurm_error("objtier: --objtier option %s: value too long (at most %zu bytes)", key,
			    size - 1);
		return -1;
	}
	strcpy(dst, value);
	return 0;
}

static int is_size(const char *s)
{
	const char *p = s;
	while (*p >= '0' && *p <= '9')
		p++;
	if (p == s)
		return 0;
	return !*p || (strchr("KMGTkmgt", *p) && (!p[1] || !strcmp(p + 1, "iB") || !strcmp(p + 1, "B")));
}

static int is_integer(const char *s)
{
	if (*s == '-')
		s++;
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* Parses one OPTIONS word (key:value or a flag). */
static int parse_word(char *word)
{
	char *value = strchr(word, ':');
	if (value)
		*value++ = '\0';
	if (!strcmp(word, "priority")) {
		if (copy_value(priority, sizeof priority, word, value ? value : "") < 0)
			return -1;
		if (!is_integer(priority)) {
			slurm_error("objtier: --objtier priority:%s: not an integer (e.g. priority:10)",
				    priority);
			return -1;
		}
	} else if (!strcmp(word, "capacity")) {
		if (copy_value(capacity, sizeof capacity, word, value ? value : "") < 0)
			return -1;
		if (!is_size(capacity)) {
			slurm_error("objtier: --objtier capacity:%s: not a size (e.g. capacity:512M, "
				    "capacity:2G)",
				    capacity);
			return -1;
		}
	} else if (!strcmp(word, "placement")) {
		return copy_value(placement, sizeof placement, word, value ? value : "");
	} else if (!strcmp(word, "profile")) {
		return copy_value(profile_dir, sizeof profile_dir, word, value ? value : "");
	} else if (!strcmp(word, "no-migrate") && !value) {
		no_migrate = 1;
	} else {
		slurm_error("objtier: --objtier: unknown option '%s%s%s'; use priority:N, "
			    "capacity:SIZE, placement:FILE, no-migrate or profile:DIR, comma separated",
			    word, value ? ":" : "", value ? value : "");
		return -1;
	}
	return 0;
}

static int parse_objtier(int val, const char *optarg, int remote)
{
	char buf[OPTION_VALUE_MAX];
	char *save = NULL, *word;
	(void)val;
	(void)remote;

	enabled = 1;
	if (!optarg || !*optarg)
		return 0;
	if (strlen(optarg) >= sizeof buf) {
		slurm_error("objtier: --objtier: options too long (at most %zu bytes)", sizeof buf - 1);
		return -1;
	}
	strcpy(buf, optarg);
	for (word = strtok_r(buf, ",", &save); word; word = strtok_r(NULL, ",", &save))
		if (parse_word(word) < 0)
			return -1;
	if (*profile_dir && (*priority || *capacity || *placement || no_migrate)) {
		slurm_error("objtier: --objtier: profile:DIR records what a task does and cannot be "
			    "combined with priority, capacity, placement or no-migrate");
		return -1;
	}
	return 0;
}

/* Reads plugstack.conf's arguments (objtier=PATH, socket=PATH, exec=PATH). */
static int parse_plugstack(int ac, char **av)
{
	int i;
	for (i = 0; i < ac; i++) {
		char *dst = NULL;
		const char *value = NULL;
		if (!strncmp(av[i], "objtier=", 8)) {
			dst = objtier_path;
			value = av[i] + 8;
		} else if (!strncmp(av[i], "socket=", 7)) {
			dst = socket_path;
			value = av[i] + 7;
		} else if (!strncmp(av[i], "exec=", 5)) {
			dst = exec_path;
			value = av[i] + 5;
		}
		if (!dst || !*value || strlen(value) >= PATH_MAX) {
			slurm_error("objtier: plugstack.conf: bad argument '%s'; expected objtier=PATH, "
				    "socket=PATH or exec=PATH",
				    av[i]);
			return -1;
		}
		strcpy(dst, value);
	}
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	if (parse_plugstack(ac, av) < 0)
		return -1;
	if (spank_option_register(sp, &objtier_option) != ESPANK_SUCCESS) {
		slurm_error("objtier: cannot register the --objtier option");
		return -1;
	}
	return 0;
}

static int set(spank_t sp, const char *name, const char *value)
{
	if (spank_setenv(sp, name, value, 1) != ESPANK_SUCCESS) {
		slurm_error("objtier: cannot set %s in the task's environment", name);
		return -1;
	}
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	int argc = 0;
	char **argv = NULL;
	uint32_t job = 0, step = 0, task = 0;
	char host[256], path[PATH_MAX + 512];
	(void)ac;
	(void)av;

	if (!enabled)
		return 0;
	if (access(objtier_path, X_OK) != 0) {
		slurm_error("objtier: --objtier: %s is not an executable on this node (%s); install "
			    "objtier there, or name its path with objtier=PATH in plugstack.conf",
			    objtier_path, strerror(errno));
		return -1;
	}
	if (access(exec_path, X_OK) != 0) {
		slurm_error("objtier: --objtier: the task wrapper %s is not an executable on this node "
			    "(%s); install it beside the plugin, or name it with exec=PATH in "
			    "plugstack.conf",
			    exec_path, strerror(errno));
		return -1;
	}
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1) {
		slurm_error("objtier: --objtier: cannot read the task's command line");
		return -1;
	}
	if (set(sp, "OBJTIER_SLURM_OBJTIER", objtier_path) < 0 ||
	    set(sp, "OBJTIER_SLURM_PROGRAM", argv[0]) < 0 ||
	    set(sp, "OBJTIER_SLURM_SOCKET", socket_path) < 0 ||
	    set(sp, "OBJTIER_SLURM_PRIORITY", priority) < 0 ||
	    set(sp, "OBJTIER_SLURM_FAST_CAPACITY", capacity) < 0 ||
	    set(sp, "OBJTIER_SLURM_PLACEMENT", placement) < 0 ||
	    set(sp, "OBJTIER_SLURM_NO_MIGRATE", no_migrate ? "1" : "") < 0)
		return -1;
	if (*profile_dir) {
		if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
		    spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
		    spank_get_item(sp, S_TASK_GLOBAL_ID, &task) != ESPANK_SUCCESS) {
			slurm_error("objtier: --objtier: cannot read the job, step or task id");
			return -1;
		}
		if (gethostname(host, sizeof host) != 0)
			strcpy(host, "node");
		host[sizeof host - 1] = '\0';
		snprintf(path, sizeof path, "%s/%u.%u.%s.%u.profile.json", profile_dir, job, step,
			 host, task);
		if (set(sp, "OBJTIER_SLURM_PROFILE", path) < 0)
			return -1;
	} else if (set(sp, "OBJTIER_SLURM_PROFILE", "") < 0) {
		return -1;
	}
	/* slurmstepd execs argv[0] with this argv after the hooks: the wrapper takes its place. */
	argv[0] = strdup(exec_path);
	if (!argv[0]) {
		slurm_error("objtier: --objtier: out of memory");
		return -1;
	}
	return 0;
}
