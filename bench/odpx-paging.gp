# odpx-paging.gp - the plots of an odpx-paging report (and of odpstat-plot).
#
#   gnuplot -e "dir='REPORT'" bench/odpx-paging.gp
#
# Reads the whitespace-separated tables odpx-paging writes into REPORT (a
# header line of column names first) and draws a PNG beside each:
#   pincache-entries.tsv -> pincache-entries.png   miss ratio and ns/registration
#   pincache-ws.tsv      -> pincache-ws.png          against max_entries / the working set
#   warmup.tsv           -> warmup.png               RDMA MB/s, latency, faults over time
#   prefetch.tsv         -> prefetch.png             MB/s over time: none, async, sync
#   workingset.tsv       -> workingset.png           MB/s and refaults against working set / memory.max
#   timeline.tsv         -> timeline.png             four rates over time (columns 2-5),
#                                                    the detector's state (column 6:
#                                                    0 OK, 1 WARMING, 2 THRASH) as a band
# A table that is absent is skipped.  `title` may name the run.

if (!exists("dir")) dir = "."
if (!exists("title")) title = ""
exists_file(f) = system("test -s '" . f . "' && echo 1 || echo 0") + 0

set terminal pngcairo size 1000,600 noenhanced font ",10"
set datafile commentschars "#"
set grid
set key outside right top

# state -> colour: OK green, WARMING orange, THRASH red
state_rgb(s) = s >= 2 ? 0xd62728 : (s >= 1 ? 0xff9f0e : 0x2ca02c)

do for [what in "entries ws"] {
	f = dir . "/pincache-" . what . ".tsv"
	if (exists_file(f)) {
		set output dir . "/pincache-" . what . ".png"
		set title sprintf("%s pin-cache fit against %s (uring backend, buffers at random; point colour: detector state)", \
			title, what eq "entries" ? "max_entries, working set fixed" : "the working set, max_entries fixed")
		set logscale x 2
		set xlabel (what eq "entries" ? "max_entries" : "working set (buffers)")
		set ylabel "miss ratio"
		set yrange [0:1.05]
		set y2label "ns per registration"
		set y2tics
		set autoscale y2
		xcol = what eq "entries" ? 2 : 1
		plot f using xcol:3:(state_rgb($5)) skip 1 with linespoints pt 7 ps 1.5 lc rgb variable title "miss ratio", \
		     f using xcol:4 skip 1 axes x1y2 with linespoints pt 5 lc rgb "#1f77b4" title "ns/reg"
		unset logscale x
		unset y2tics
		unset y2label
		set yrange [*:*]
	}
}

f = dir . "/timeline.tsv"
if (exists_file(f)) {
	set output dir . "/timeline.png"
	unset title
	set multiplot title title . " detector timeline (band: OK green, WARMING orange, THRASH red)"
	set lmargin 12
	set rmargin 22
	set tmargin 2
	set bmargin 1
	set size 1,0.78
	set origin 0,0.22
	set logscale y
	set yrange [0.5:*]	# a rate of 0 is drawn at 0.5, on the axis
	set ylabel "per second"
	set format x ""
	set xlabel ""
	set key autotitle columnheader
	plot for [c=2:5] f using 1:(column(c) > 0 ? column(c) : 0.5) with lines lw 7 - c dashtype c - 1
	unset logscale y
	set size 1,0.22
	set origin 0,0
	set tmargin 0
	set bmargin 3
	set format x "%g"
	set xlabel "seconds"
	set ylabel "state"
	set yrange [0:1]
	unset ytics
	set key off
	set style fill solid 1.0 noborder
	unset boxwidth
	plot f using 1:(1):(state_rgb($6)) with boxes lc rgb variable notitle
	set key noautotitle
	set ytics
	set yrange [*:*]
	set key outside right top
	unset multiplot
}

# what the timeline's multiplot changed
set size 1,1
set origin 0,0
unset lmargin
unset rmargin
unset tmargin
unset bmargin
set format x "%g"
set format y "%g"
set yrange [*:*]
set ytics
set key outside right top noautotitle

f = dir . "/warmup.tsv"
if (exists_file(f)) {
	set output dir . "/warmup.png"
	unset title
	set multiplot layout 2,1 title title . " warm-up of a fresh ODP region (RDMA READ into it, WRITE from it, 64 KiB each)"
	set logscale y
	set xlabel ""
	set ylabel "MB/s; latency us"
	plot f index 0 using 2:3 with linespoints pt 7 ps 0.5 title "MB/s", \
	     f index 0 using 2:4 with linespoints pt 5 ps 0.5 title "latency (us)"
	set xlabel "seconds since the registration"
	set ylabel "page faults / interval"
	unset logscale y
	plot f index 0 using 2:5 with impulses lw 3 title "pgfault (/proc/vmstat)"
	unset multiplot
}

f = dir . "/prefetch.tsv"
if (exists_file(f)) {
	set output dir . "/prefetch.png"
	unset title
	set title title . " prefetch impact: the same sweeps, fresh regions"
	set logscale y
	set xlabel "seconds since the registration"
	set ylabel "MB/s"
	plot f index 0 using 2:3 with linespoints pt 7 ps 0.5 title "no prefetch", \
	     f index 1 using 2:3 with linespoints pt 5 ps 0.5 title "odpx_prefetch (engine)", \
	     f index 2 using 2:3 with linespoints pt 9 ps 0.5 title "ODPX_PREFETCH_SYNC"
	unset logscale y
}

# workingset.tsv: block 0 explicit ODP, block 1 pinned, block 2 hybrid; columns variant ws_ratio
# ws_mib mb_s refault_s majflt_s state outcome (0 ok, 1 registration failed, 2 OOM-killed,
# 3 failed, 4 mode not available, 5 ok, served direct, 6 stalled) mb_min mb_max: the median
# round and the range of the rounds, drawn as error bars.  A point that did not run is drawn
# at the bottom as a cross, labelled with its outcome.
f = dir . "/workingset.tsv"
if (exists_file(f)) {
	set output dir . "/workingset.png"
	set title title . " working set against memory.max (cgroup v2, swap): RDMA WRITE+READ of 64 KiB, bytes checked\nthe median of the rounds, bars: their range; ODP point colour: the thrash callback's last state"
	set logscale x 2
	set xrange [0.2:5]
	set xlabel "working set / memory.max"
	set ylabel "MB/s (both directions)"
	set y2label "refaulted pages / s"
	set y2tics
	set logscale y2
	set yrange [0:*]
	ran(c) = c == 0 || c == 5
	outcome(c) = c == 1 ? "registration failed" : (c == 2 ? "OOM-killed" : (c == 4 ? "not available" : (c == 6 ? "stalled" : "failed")))
	plot f index 0 using 2:(ran($8) ? $4 : 1/0):(state_rgb($7)) with linespoints pt 7 ps 1.8 lc rgb variable title "explicit ODP MB/s", \
	     f index 1 using 2:(ran($8) ? $4 : 1/0) with linespoints pt 5 ps 1.5 lc rgb "#1f77b4" title "pinned (budget raised) MB/s", \
	     f index 2 using 2:(ran($8) ? $4 : 1/0) with linespoints pt 9 ps 1.8 lw 2 lc rgb "#9467bd" title "hybrid (budget raised) MB/s", \
	     f index 0 using 2:(ran($8) ? $4 : 1/0):9:10 with yerrorbars pt 7 ps 0 lc rgb "#2ca02c" notitle, \
	     f index 1 using 2:(ran($8) ? $4 : 1/0):9:10 with yerrorbars pt 7 ps 0 lc rgb "#1f77b4" notitle, \
	     f index 2 using 2:(ran($8) ? $4 : 1/0):9:10 with yerrorbars pt 7 ps 0 lc rgb "#9467bd" notitle, \
	     f index 1 using 2:(!ran($8) ? 0 : 1/0) with points pt 2 ps 2.5 lw 2 lc rgb "#1f77b4" title "pinned: did not run", \
	     f index 1 using 2:(!ran($8) ? 0 : 1/0):(outcome($8)) with labels rotate by 90 left offset -1,1.5 notitle, \
	     f index 2 using 2:(!ran($8) ? 0 : 1/0) with points pt 3 ps 2.5 lw 2 lc rgb "#9467bd" title "hybrid: did not run", \
	     f index 2 using 2:(!ran($8) ? 0 : 1/0):(outcome($8)) with labels rotate by 90 left offset 1,1.5 notitle, \
	     f index 0 using 2:(ran($8) && $5 > 0 ? $5 : 1/0) axes x1y2 with linespoints pt 4 dt 2 lc rgb "#7f7f7f" title "ODP refaults/s"
	unset logscale x
	set xrange [*:*]
	unset logscale y2
	unset y2tics
	unset y2label
	set yrange [*:*]
}

# phase-MODE.tsv (odp, pinned, hybrid): t mb_s state pinned_mib odp_mrs direct_regs
# reg_failed phase odp_mib hybrid_pinned hybrid_odp hybrid_to_pin hybrid_released, one line
# per 250 ms of the phase experiment.  Top: MB/s of each mode; middle: the MiB each mode
# holds (pinned for pin mode; the ODP MRs' span for explicit ODP; both for hybrid) and
# hybrid's placements
# (cumulative: served pinned, served ODP, moved from ODP to pinned); bottom: a band per mode,
# the detector's state (OK green, WARMING orange, THRASH red).  A mode whose table is absent
# did not run (its reason is in index.md and samples.ndjson).
fo = dir . "/phase-odp.tsv"
fp = dir . "/phase-pinned.tsv"
fh = dir . "/phase-hybrid.tsv"
if (exists_file(fo)) {
	set output dir . "/phase.png"
	set terminal pngcairo size 1100,800 noenhanced font ",10"
	unset title
	set multiplot title title . " phase change: working set M/4, then 2M, then M/4 (M = memory.max); one 64 KiB registration per chunk"
	set lmargin 12
	set rmargin 34
	set key outside right top
	set size 1,0.42
	set origin 0,0.53
	set tmargin 2
	set bmargin 1
	set format x ""
	set xlabel ""
	set ylabel "MB/s"
	set logscale y
	plot fo using 1:($2 > 0 ? $2 : 1/0) skip 1 with lines lw 2 lc rgb "#2ca02c" title "explicit ODP", \
	     (exists_file(fp) ? fp : fo) using 1:(exists_file(fp) && $2 > 0 ? $2 : 1/0) skip 1 with lines lw 2 lc rgb "#1f77b4" title "pinned (budget raised)", \
	     (exists_file(fh) ? fh : fo) using 1:(exists_file(fh) && $2 > 0 ? $2 : 1/0) skip 1 with lines lw 2 lc rgb "#9467bd" title "hybrid (budget raised)"
	unset logscale y
	set size 1,0.30
	set origin 0,0.23
	set ylabel "MiB"
	set y2label "hybrid: registrations"
	set y2tics
	# without hybrid's table no point is on y2: a fixed range keeps gnuplot plotting
	if (exists_file(fh)) { set autoscale y2 } else { set y2range [0:1] }
	plot fo using 1:9 skip 1 with lines lw 2 lc rgb "#2ca02c" title "explicit ODP: ODP MiB", \
	     (exists_file(fp) ? fp : fo) using 1:(exists_file(fp) ? $4 : 1/0) skip 1 with lines lw 2 lc rgb "#1f77b4" title "pinned: pinned MiB", \
	     (exists_file(fh) ? fh : fo) using 1:(exists_file(fh) ? $4 : 1/0) skip 1 with lines lw 2 lc rgb "#9467bd" title "hybrid: pinned MiB", \
	     (exists_file(fh) ? fh : fo) using 1:(exists_file(fh) ? $9 : 1/0) skip 1 with lines lw 2 dt 2 lc rgb "#9467bd" title "hybrid: ODP MiB", \
	     (exists_file(fh) ? fh : fo) using 1:(exists_file(fh) ? $10 : 1/0) skip 1 axes x1y2 with lines dt 2 lw 2 lc rgb "#8c564b" title "hybrid: served pinned", \
	     (exists_file(fh) ? fh : fo) using 1:(exists_file(fh) ? $11 : 1/0) skip 1 axes x1y2 with lines dt 3 lw 2 lc rgb "#e377c2" title "hybrid: served ODP", \
	     (exists_file(fh) ? fh : fo) using 1:(exists_file(fh) ? $12 : 1/0) skip 1 axes x1y2 with lines dt 1 lw 1 lc rgb "#17becf" title "hybrid: moved to pinned"
	unset y2tics
	unset y2label
	set autoscale y2
	set size 1,0.23
	set origin 0,0
	set tmargin 0
	set bmargin 3
	set format x "%g"
	set xlabel "seconds"
	set ylabel "state"
	set yrange [0:3]
	set ytics ("ODP" 0.5, "pinned" 1.5, "hybrid" 2.5)
	set style fill solid 1.0 noborder
	# a box per 250 ms sample: centre, half a sample wide, 0.45 of a band high
	plot fo using 1:(0.5):(0.125):(0.45):(state_rgb($3)) skip 1 with boxxyerror lc rgb variable notitle, \
	     (exists_file(fp) ? fp : fo) using 1:(exists_file(fp) ? 1.5 : 1/0):(0.125):(0.45):(state_rgb($3)) skip 1 with boxxyerror lc rgb variable notitle, \
	     (exists_file(fh) ? fh : fo) using 1:(exists_file(fh) ? 2.5 : 1/0):(0.125):(0.45):(state_rgb($3)) skip 1 with boxxyerror lc rgb variable notitle
	unset multiplot
	set yrange [*:*]
	set ytics autofreq	# the bands' labels go
	unset lmargin
	unset rmargin
	unset tmargin
	unset bmargin
	set size 1,1
	set origin 0,0
	set terminal pngcairo size 1000,600 noenhanced font ",10"
}

# latency-cdf.tsv: the CDF of each row's one-page transfers (latency.tsv in the same order):
# block 0 the pinned hit, then resident, first touch and after reclaim with no prefetch
# (1-3), odpx_prefetch (4-6) and ODPX_PREFETCH_SYNC (7-9).  One column per prefetch variant,
# the pinned hit in each; the CDF above, 1 - CDF on a log scale below (the tail); x
# logarithmic: the tail spans decades.
f = dir . "/latency-cdf.tsv"
if (exists_file(f)) {
	set output dir . "/latency.png"
	set terminal pngcairo size 1500,900 noenhanced font ",10"
	unset title
	set ytics autofreq
	set multiplot layout 2,3 title title . " fault latency: one 4 KiB RDMA READ into the region, from post to completion (top: CDF; bottom: the fraction slower, the tail)"
	set logscale x 10
	set xlabel "latency (us)"
	set key inside right bottom
	pfname(i) = i == 0 ? "no prefetch" : (i == 1 ? "odpx_prefetch" : "ODPX_PREFETCH_SYNC")
	do for [pass=0:1] {
		if (pass == 0) {
			set ylabel "fraction of transfers"
			unset logscale y
			set yrange [0:1.02]
			set key inside right bottom
		} else {
			set ylabel "fraction slower than x"
			set logscale y
			set yrange [1e-4:1]
			set key inside left bottom
		}
		do for [pf=0:2] {
			set title pfname(pf)
			# 1 - F, the last sample (F = 1) left out of the log plot
			y(c) = pass == 0 ? c : (c < 1 ? 1 - c : 1/0)
			plot f index 0 using 1:(y($2)) with steps lw 2 lc rgb "#1f77b4" title "pinned hit", \
			     f index (1 + 3 * pf) using 1:(y($2)) with steps lw 2 lc rgb "#2ca02c" title "ODP resident", \
			     f index (2 + 3 * pf) using 1:(y($2)) with steps lw 2 lc rgb "#ff7f0e" title "ODP first touch", \
			     f index (3 + 3 * pf) using 1:(y($2)) with steps lw 2 lc rgb "#d62728" title "ODP after reclaim"
		}
	}
	unset multiplot
	unset logscale x
	unset logscale y
	set yrange [*:*]
	set key outside right top
	set terminal pngcairo size 1000,600 noenhanced font ",10"
}
