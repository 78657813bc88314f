// SPDX-License-Identifier: MIT
/*
 * stats-hostile: the numbers of a segment are read as hostile.  A segment
 * is a file that its writer, or anyone who can write it, fills at will; the
 * sums odpx_seg_scan() and odpstat make of it saturate instead of wrapping
 * or overflowing a signed integer (UBSan stops the sanitizer build at one):
 *   - two shards whose releases are INT64_MAX each, nothing taken, pinned
 *     bytes 4096: the unused bytes are 4096 (the pinned bytes bound them),
 *     not 0 from a sum gone negative;
 *   - hits of UINT64_MAX and 5 in two shards: UINT64_MAX, not 4.
 * Both through odpx_seg_scan() and through `odpstat -p PID --json --once`,
 * of a segment forged in this process's descriptor table.
 */
#include <fcntl.h>
#include <sys/wait.h>

#include "stats-forge.h"

static void put(int fd, uint64_t v, size_t off)
{
	CHECK(pwrite(fd, &v, sizeof(v), (off_t)off) == sizeof(v), "pwrite: %s", strerror(errno));
}

static void odpstat_json(pid_t g, char *buf, size_t cap)
{
	char *odpstat = odpstat_path(), spid[16];
	int out[2], st;
	size_t got = 0;
	ssize_t n;
	pid_t sp;

	snprintf(spid, sizeof(spid), "%d", (int)g);
	CHECK(pipe(out) == 0, "pipe");
	fflush(stdout);
	if (!(sp = fork())) {
		dup2(out[1], 1);
		execl(odpstat, odpstat, "-p", spid, "--json", "--no-netlink", "--once", NULL);
		_exit(127);
	}
	close(out[1]);
	while (got < cap - 1 && (n = read(out[0], buf + got, cap - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = 0;
	close(out[0]);
	CHECK(waitpid(sp, &st, 0) == sp, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "odpstat -p %s: status %#x, output %.300s",
	      spid, st, buf);
}

int main(void)
{
	struct odpx_seg_info si[2];
	static char json[1 << 16];
	pid_t g = getpid();
	size_t sh1 = SEG_HDR_BYTES + sizeof(struct stat_shard);
	int fd = forge(g, 0, UINT64_MAX), k;

	put(fd, 5, sh1 + offsetof(struct stat_shard, hits));
	put(fd, INT64_MAX, SEG_HDR_BYTES + offsetof(struct stat_shard, released));
	put(fd, INT64_MAX, sh1 + offsetof(struct stat_shard, released));
	put(fd, 4096, offsetof(struct seg_hdr, pinned_bytes));

	k = odpx_seg_scan(g, si, 2);
	CHECK(k == 1, "the forged segment: %d found", k);
	CHECK(si[0].st.pinned_bytes == 4096, "pinned_bytes %llu (the forgery is wrong)",
	      (unsigned long long)si[0].st.pinned_bytes);
	CHECK(si[0].st.unused_bytes == 4096, "unused_bytes %llu, want 4096",
	      (unsigned long long)si[0].st.unused_bytes);
	CHECK(si[0].st.hits == UINT64_MAX, "hits %llu, want %llu (saturated)",
	      (unsigned long long)si[0].st.hits, (unsigned long long)UINT64_MAX);

	odpstat_json(g, json, sizeof(json));
	CHECK(strstr(json, "\"unused_bytes\":4096,"), "odpstat: no \"unused_bytes\":4096 in %.2000s",
	      json);
	CHECK(strstr(json, "\"hits\":18446744073709551615,"),
	      "odpstat: no saturated hits in %.2000s", json);
	close(fd);
	printf("hostile segment numbers: sums saturate (odpx_seg_scan and odpstat)\n");
	return 0;
}
