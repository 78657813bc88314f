// SPDX-License-Identifier: MIT
/*
 * dev-preload-pyverbs: rdma-core's own test suite (pyverbs, shipped by
 * Debian's python3-pyverbs under /usr/share/doc/rdma-core/tests), written
 * outside this project, against the drop-in.  Its memory-registration and
 * ODP modules (test_mr, test_odp, through its own run_tests.py on the test
 * device) run natively, then under libodpx-preload.so in pin and in
 * explicit mode; every test must end as it ends natively (ok, skipped, or
 * the same failure), and the run must not crash.
 */
#include "dev-preload.h"

#define SUITE "/usr/share/doc/rdma-core/tests"
#define WORK "/tmp/rdma-core-tests"
#define MODULES "test_mr test_odp"
#define MIN_OK 10	/* natively at least this many pass, or the comparison proves little */

static char cmd[256];

/*
 * The suite's own loader (tests/run_tests.py's) with a result class that
 * writes "TEST-ID OUTCOME" lines to the file named first, so that what the
 * tests and the libraries print on the way cannot blur an outcome.
 */
static const char runner[] =
	"import os, sys, unittest\n"
	"from importlib.machinery import SourceFileLoader\n"
	"sys.path.insert(0, os.path.join(os.getcwd(), 'tests'))\n"
	"from args_parser import parser\n"
	"tests = SourceFileLoader('tests', 'tests/__init__.py').load_module()\n"
	"out = open(sys.argv.pop(1), 'w')\n"
	"parser.parse_args()\n"
	"class R(unittest.TextTestResult):\n"
	"    def rec(self, t, w):\n"
	"        out.write(t.id() + ' ' + w + '\\n'); out.flush()\n"
	"    def addSuccess(self, t): super().addSuccess(t); self.rec(t, 'ok')\n"
	"    def addSkip(self, t, r): super().addSkip(t, r); self.rec(t, 'skipped')\n"
	"    def addFailure(self, t, e): super().addFailure(t, e); self.rec(t, 'FAIL')\n"
	"    def addError(self, t, e): super().addError(t, e); self.rec(t, 'ERROR')\n"
	"    def addExpectedFailure(self, t, e): super().addExpectedFailure(t, e); self.rec(t, 'xfail')\n"
	"    def addUnexpectedSuccess(self, t): super().addUnexpectedSuccess(t); self.rec(t, 'xpass')\n"
	"unittest.main(module=tests, testRunner=unittest.TextTestRunner(resultclass=R, verbosity=2))\n";

/* The suite under @c: its exit status; its output in @out, its outcomes in @res. */
static int run(const struct pre_cfg *c, char *out, size_t cap, char *res, size_t rcap)
{
	char log[64], *argv[] = { "/bin/sh", "-c", cmd, NULL };

	snprintf(log, sizeof(log), "/tmp/pre-pyverbs.%d", (int)getpid());
	unlink(WORK "/outcomes");
	int rc = pre_wait(pre_spawn(c, argv, log), dev_now_ms() + 100000);
	pre_slurp(log, out, cap);
	pre_slurp(WORK "/outcomes", res, rcap);
	unlink(log);
	return rc;
}

int main(void)
{
	static char out[1 << 20], want[1 << 16], got[1 << 16];
	static const struct pre_cfg native = { "native", NULL, NULL, 0 },
		pin = { "pin", "pin", NULL, 0 }, explicit = { "explicit", "explicit", NULL, 0 };
	const struct pre_cfg *const cfgs[] = { &pin, &explicit };
	struct dev d;
	int failed = 0;

	dev_open(&d);
	snprintf(cmd, sizeof(cmd), "cd " WORK " && exec python3 odpx_run.py " WORK "/outcomes -v --dev %s "
		 "--port %u --gid %d " MODULES, d.name, d.port, d.gid_index);
	dev_close(&d);
	if (access(SUITE, R_OK))
		dev_fail("%s: %s (python3-pyverbs, in the guest image)", SUITE, strerror(errno));
	if (system("rm -rf " WORK " && mkdir -p " WORK " && cp -r " SUITE " " WORK "/tests && "
		   "gunzip -f " WORK "/tests/*.gz") != 0)
		dev_fail("could not unpack %s into %s", SUITE, WORK);
	FILE *f = fopen(WORK "/odpx_run.py", "w");
	if (!f || fputs(runner, f) < 0 || fclose(f))
		dev_fail("writing %s/odpx_run.py: %s", WORK, strerror(errno));
	int64_t t0 = dev_now_ms();
	int nrc = run(&native, out, sizeof(out), want, sizeof(want));
	int nok = 0;
	for (const char *q = want; (q = strstr(q, " ok\n")); q++)
		nok++;
	if (nrc != 0 || nok < MIN_OK) {
		pre_show("native", out);
		dev_fail("the native run: exit %d, %d tests passed (want 0 and at least %d)", nrc,
			 nok, MIN_OK);
	}
	printf("native (exit %d, %.1f s):\n%s", nrc, (dev_now_ms() - t0) / 1e3, want);
	for (size_t m = 0; m < 2; m++) {
		t0 = dev_now_ms();
		int rc = run(cfgs[m], out, sizeof(out), got, sizeof(got));
		if (rc != nrc || strcmp(got, want)) {
			pre_show(cfgs[m]->name, out);
			printf("FAIL: under the drop-in (%s, exit %d), tests ended otherwise than "
			       "natively (exit %d):\n%s", cfgs[m]->name, rc, nrc, got);
			failed++;
			continue;
		}
		printf("%s: every test as natively (exit %d, %.1f s)\n", cfgs[m]->name, rc,
		       (dev_now_ms() - t0) / 1e3);
	}
	if (failed)
		dev_fail("rdma-core's tests under the drop-in differ from the native run");
	printf("ok\n");
	return 0;
}
