// SPDX-License-Identifier: MIT
/*
 * stats-sysfs: the file sources read recorded fixture trees correctly, and
 * reject missing, empty, garbage and out-of-range files with an error that
 * names the file, never a crash and never a made-up counter.
 *
 * tests/fixtures/:
 *   sysfs-legacy   MLNX_OFED uverbs files (one device complete, one partial,
 *                  2^64-1 and hex values) and mlx5-style port hw_counters
 *   sysfs-bad      empty, "abc", 2^64, "-5", "12 34", a directory, an
 *                  overlong file, "\n", "0x"
 *   sysfs-rxe      recorded in the Soft-RoCE guest: rxe0 port 1's 17
 *                  hw_counters, a uverbs0 without ODP files
 *   debugfs-mlx5   mlx5 odp_stats of two functions (one with garbage) and
 *                  one without the directory
 *   procfs, procfs-bad  vmstat and <pid>/stat
 * Also: the 2^64 wrap of ctr_delta, the roots from the environment, and
 * odpstat --json over the fixtures.
 */
#include <inttypes.h>
#include <limits.h>
#include <sys/wait.h>

#include "test.h"
#include "../sysfs-stats/counters.h"

static char fx[PATH_MAX];



static struct stats_roots roots(const char *sys, const char *dbg, const char *proc)
{
	struct stats_roots r;
	char a[PATH_MAX + 32], b[PATH_MAX + 32], c[PATH_MAX + 32];

	snprintf(a, sizeof(a), "%s/%s", fx, sys);
	snprintf(b, sizeof(b), "%s/%s", fx, dbg);
	snprintf(c, sizeof(c), "%s/%s", fx, proc);
	stats_roots_init(&r, a, b, c);
	return r;
}

static uint64_t val(const struct ctr_set *s, enum ctr_source src, const char *where,
		    const char *name)
{
	const struct ctr *c = ctr_find(s, src, where, name);

	CHECK(c, "counter %s %s/%s missing", ctr_source_name(src), where, name);
	return c->value;
}

static bool has_err(const struct ctr_set *s, const char *file, const char *why)
{
	for (size_t i = 0; i < s->nerr; i++)
		if (strstr(s->err[i].msg, file) && strstr(s->err[i].msg, why))
			return true;
	return false;
}

static void test_parse(void)
{
	uint64_t v;

	CHECK_RC(ctr_parse_value("42\n", 3, &v), 0);
	CHECK(v == 42, "42");
	CHECK_RC(ctr_parse_value("18446744073709551615", 20, &v), 0);
	CHECK(v == UINT64_MAX, "2^64-1");
	CHECK_RC(ctr_parse_value("18446744073709551616", 20, &v), -ERANGE);
	CHECK_RC(ctr_parse_value("99999999999999999999999", 23, &v), -ERANGE);
	CHECK_RC(ctr_parse_value("0xffffffffffffffff", 18, &v), 0);
	CHECK(v == UINT64_MAX, "hex 2^64-1");
	CHECK_RC(ctr_parse_value("0x10000000000000000", 19, &v), -ERANGE);
	CHECK_RC(ctr_parse_value("", 0, &v), -ENODATA);
	CHECK_RC(ctr_parse_value(" \n", 2, &v), -ENODATA);
	CHECK_RC(ctr_parse_value("-1", 2, &v), -EINVAL);
	CHECK_RC(ctr_parse_value("1 2", 3, &v), -EINVAL);
	CHECK_RC(ctr_parse_value("0x", 2, &v), -EINVAL);
	CHECK_RC(ctr_parse_value("12\0" "3", 4, &v), -EINVAL);
	/* wrap at 2^64 and reset */
	CHECK(ctr_delta(UINT64_MAX - 5, 10) == 16, "wrap: %llu",
	      (unsigned long long)ctr_delta(UINT64_MAX - 5, 10));
	CHECK(ctr_delta(1000, 10) == 10, "reset counts from 0");
	CHECK(ctr_delta(10, 1000) == 990, "plain");
}

static void test_legacy(void)
{
	struct stats_roots r = roots("sysfs-legacy", "debugfs-mlx5", "procfs");
	struct ctr_set s;
	uint64_t start;

	ctr_set_init(&s);
	CHECK_RC(src_uverbs_read(&r, NULL, &s), 9);
	CHECK(s.nerr == 0, "legacy: unexpected error %s", s.err[0].msg);
	CHECK(val(&s, SRC_UVERBS, "mlx5_0", "num_page_faults") == 1200, "faults");
	CHECK(val(&s, SRC_UVERBS, "mlx5_0", "num_page_fault_pages") == 4800, "fault pages");
	CHECK(val(&s, SRC_UVERBS, "mlx5_0", "num_invalidation_pages") == 2400, "inval pages");
	CHECK(val(&s, SRC_UVERBS, "mlx5_0", "invalidations_faults_contentions") == 5, "cont");
	CHECK(val(&s, SRC_UVERBS, "mlx5_1", "num_page_faults") == UINT64_MAX, "2^64-1");
	CHECK(val(&s, SRC_UVERBS, "mlx5_1", "num_page_fault_pages") == 16, "hex");
	CHECK(!ctr_find(&s, SRC_UVERBS, "mlx5_1", "num_invalidations"), "absent file made up");
	ctr_set_clear(&s);
	CHECK_RC(src_uverbs_read(&r, "mlx5_1", &s), 2);	/* -d filter */

	ctr_set_clear(&s);
	CHECK_RC(src_hw_counters_read(&r, NULL, &s), 6);
	CHECK(val(&s, SRC_HW_COUNTERS, "mlx5_0/1", "local_ack_timeout_err") == 9, "hw");
	CHECK(val(&s, SRC_HW_COUNTERS, "mlx5_0/1", "rnr_nak_retry_err") == 3, "hw rnr");

	ctr_set_clear(&s);
	CHECK_RC(src_debugfs_read(&r, &s), 6);
	CHECK(val(&s, SRC_DEBUGFS, "0000:08:00.0", "num_odp_mr_pages") == 1024, "debugfs");
	CHECK(val(&s, SRC_DEBUGFS, "0000:08:00.1", "num_odp_mrs") == 1, "debugfs 2");
	CHECK(!ctr_find(&s, SRC_DEBUGFS, "0000:08:00.1", "num_prefetch"), "garbage counted");
	CHECK(s.nerr == 1 && has_err(&s, "0000:08:00.1/odp_stats/num_prefetch", "not an unsigned number"),
	      "debugfs garbage: %zu errors: %s", s.nerr, s.nerr ? s.err[0].msg : "");

	ctr_set_clear(&s);
	CHECK(src_vmstat_read(&r, &s) >= 4, "vmstat");
	CHECK(val(&s, SRC_VMSTAT, "", "pgfault") == 1000000, "pgfault");
	CHECK(val(&s, SRC_VMSTAT, "", "nr_mlock") == 77, "nr_mlock");
	CHECK(!ctr_find(&s, SRC_VMSTAT, "", "pgpgin"), "unrelated vmstat line kept");
	ctr_set_clear(&s);
	CHECK_RC(src_pid_stat_read(&r, 4242, &s, &start), 2);
	CHECK(val(&s, SRC_PROC_PID, "4242", "minflt") == 5555, "minflt (comm with spaces and parens)");
	CHECK(val(&s, SRC_PROC_PID, "4242", "majflt") == 7, "majflt");
	CHECK(start == 12345, "start time %" PRIu64 ", want 12345", start);
	CHECK_RC(src_pid_stat_read(&r, 4243, &s, NULL), -ESRCH);
	ctr_set_free(&s);
}

static void test_bad(void)
{
	struct stats_roots r = roots("sysfs-bad", "nonexistent", "procfs-bad");
	struct ctr_set s;
	const char *u = "uverbs0/";

	ctr_set_init(&s);
	CHECK_RC(src_uverbs_read(&r, NULL, &s), 1);	/* only "  42  " is a counter */
	CHECK(val(&s, SRC_UVERBS, "mlx5_0", "invalidations_faults_contentions") == 42, "blanks");
	CHECK(s.nerr == 6, "%zu errors", s.nerr);
	CHECK(has_err(&s, "num_page_faults", "empty file"), "empty");
	CHECK(has_err(&s, "num_page_fault_pages", "not an unsigned number"), "garbage");
	CHECK(has_err(&s, "num_invalidations", "above 2^64-1"), "overflow");
	CHECK(has_err(&s, "num_invalidation_pages", "not an unsigned number"), "negative");
	CHECK(has_err(&s, "num_prefetches_handled", "not an unsigned number"), "two numbers");
	CHECK(has_err(&s, "num_prefetch_pages", "directory"), "directory");
	CHECK(has_err(&s, u, ""), "the path is named");

	ctr_set_clear(&s);
	CHECK_RC(src_hw_counters_read(&r, NULL, &s), 1);
	CHECK(val(&s, SRC_HW_COUNTERS, "mlx5_0/1", "rnr_nak_retry_err") == 18446744073709551610ULL,
	      "near wrap");
	CHECK(s.nerr == 3, "hw errors %zu", s.nerr);
	CHECK(has_err(&s, "local_ack_timeout_err", "not an unsigned number"), "overlong");
	CHECK(has_err(&s, "out_of_sequence", "empty"), "newline only");
	CHECK(has_err(&s, "packet_seq_err", "not an unsigned number"), "0x");

	ctr_set_clear(&s);
	CHECK_RC(src_debugfs_read(&r, &s), 0);	/* no debugfs at all: nothing, no error */
	CHECK(s.nerr == 0, "absent debugfs is not an error");

	ctr_set_clear(&s);
	CHECK_RC(src_vmstat_read(&r, &s), 1);
	CHECK(val(&s, SRC_VMSTAT, "", "pgmajfault") == UINT64_MAX, "vmstat max");
	CHECK(s.nerr == 2 && has_err(&s, "vmstat:1", "pgfault") && has_err(&s, "vmstat:2", "no value"),
	      "vmstat errors %zu", s.nerr);
	ctr_set_clear(&s);
	CHECK_RC(src_pid_stat_read(&r, 4243, &s, NULL), -EINVAL);
	CHECK(s.nerr == 1 && has_err(&s, "4243/stat", ")"), "broken stat");
	ctr_set_free(&s);
}

static void test_rxe(void)
{
	struct stats_roots r = roots("sysfs-rxe", "nonexistent", "procfs");
	struct ctr_set s;
	static const char *const names[] = {
		"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
		"rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred",
		"retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err", "send_err",
		"link_downed", "rdma_sends", "rdma_recvs",
	};

	ctr_set_init(&s);
	CHECK_RC(src_uverbs_read(&r, NULL, &s), 0);	/* rxe: no ODP files */
	CHECK(s.nerr == 0, "rxe uverbs0");
	/* the 17 counters of rxe (a lifespan file, where present, is a setting) */
	int n = src_hw_counters_read(&r, NULL, &s);
	CHECK(n == 17, "rxe hw_counters: %d", n);
	CHECK(s.nerr == 0, "rxe: %s", s.err[0].msg);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		(void)val(&s, SRC_HW_COUNTERS, "rxe0/1", names[i]);
	CHECK(!ctr_find(&s, SRC_HW_COUNTERS, "rxe0/1", "lifespan"), "lifespan");
	ctr_set_free(&s);
}

static void test_env_and_tool(void)
{
	char a[PATH_MAX + 32], cmd[3 * PATH_MAX + 256], out[65536];
	struct stats_roots r;
	FILE *p;
	size_t n;
	int st;

	snprintf(a, sizeof(a), "%s/sysfs-legacy", fx);
	setenv("ODPX_SYSFS_ROOT", a, 1);
	stats_roots_init(&r, NULL, NULL, NULL);
	CHECK(!strcmp(r.sys, a) && !r.sys_default, "ODPX_SYSFS_ROOT");
	stats_roots_init(&r, "/x/", NULL, NULL);
	CHECK(!strcmp(r.sys, "/x"), "the option wins over the environment");
	unsetenv("ODPX_SYSFS_ROOT");

	/* odpstat --json over the fixtures: every counter with its source, and the errors */
	CHECK((size_t)snprintf(cmd, sizeof(cmd),
			       "%s --json --once --sysfs %s/sysfs-bad --debugfs "
			       "%s/debugfs-mlx5 --procfs %s/procfs 0.05",
			       odpstat_path(), fx, fx, fx) < sizeof(cmd), "command too long");
	CHECK((p = popen(cmd, "r")), "popen");
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	st = pclose(p);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "odpstat over fixtures: status %d: %s", st, out);
	CHECK(strstr(out, "{\"source\":\"uverbs\",\"where\":\"mlx5_0\",\"name\":"
		      "\"invalidations_faults_contentions\",\"value\":42"), "uverbs counter: %s", out);
	CHECK(strstr(out, "{\"source\":\"debugfs\",\"where\":\"0000:08:00.0\",\"name\":\"num_odp_mr_pages\",\"value\":1024"),
	      "debugfs counter");
	CHECK(strstr(out, "{\"source\":\"hw_counters\",\"where\":\"mlx5_0/1\",\"name\":\"rnr_nak_retry_err\",\"value\":18446744073709551610"),
	      "near-wrap counter");
	CHECK(strstr(out, "num_page_faults: empty file"), "errors in the JSON");
	CHECK(strchr(out, '\n') == out + n - 1, "one line (NDJSON)");
}

int main(void)
{
	find_fixtures(fx, sizeof(fx), "sysfs-legacy");
	test_parse();
	test_legacy();
	test_bad();
	test_rxe();
	test_env_and_tool();
	printf("fixtures at %s: all sources read or rejected as expected\n", fx);
	return 0;
}
