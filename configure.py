#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""configure.py - probe the toolchain and write build.ninja (and build/config.h).

    ./configure.py [--debug] [--asan] [--tsan] [--cc CC] [--prefix DIR] [--libdir DIR]
                   [--includedir DIR] [--mandir DIR] [--install-deps[=LEVEL]]

CFLAGS, CPPFLAGS and LDFLAGS from the environment are appended to odpx's own.

Run-time features (userfaultfd modes, io_uring, RDMA devices) are probed at run
time by the library, never here.
"""
import argparse, os, re, shlex, shutil, subprocess, sys, tempfile

SRC = os.path.dirname(os.path.abspath(__file__))
os.chdir(SRC)
# Debian packages by need: the library, its tools and the host suite (gnuplot: the
# suite's odpx-paging run draws its plots); the Soft-RoCE
# tier's host tools (tests/vm/odpx-vm installs these itself when missing); UCX, for the
# side-by-side benchmark only.
DEBIAN = {
    'lib': ['gcc', 'ninja-build', 'pkg-config', 'python3', 'liburing-dev', 'libibverbs-dev',
            'rdma-core', 'ibverbs-providers', 'libmnl-dev', 'util-linux', 'procps', 'groff-base',
            'gnuplot-nox'],
    'test': ['qemu-system-x86', 'debootstrap', 'xz-utils', 'e2fsprogs', 'wget', 'libopenmpi-dev',
             'libfabric-dev'],
    'bench': ['libucx-dev'],
}
LEVELS = {'lib': ['lib'], 'test': ['lib', 'test'], 'bench': ['lib', 'bench'],
          'all': ['lib', 'test', 'bench']}

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument('--debug', action='store_true', help='-O0 -g, assertions')
p.add_argument('--asan', action='store_true', help='AddressSanitizer + UBSan')
p.add_argument('--tsan', action='store_true', help='ThreadSanitizer')
p.add_argument('--cc', default=os.environ.get('CC', 'cc'),
               help='the C compiler (default $CC, else cc)')
p.add_argument('--prefix', default='/usr/local', help='where ninja install puts files (default /usr/local)')
p.add_argument('--libdir', help='libraries and odpx.pc, relative to the prefix or absolute '
               '(default lib/<multiarch triplet> under /usr, lib elsewhere)')
p.add_argument('--includedir', default='include', help='odpx.h (default include)')
p.add_argument('--mandir', default='share/man', help='man pages (default share/man)')
p.add_argument('--bindir', default='bin', help='odpstat and odpx-info (default bin)')
p.add_argument('--builddir', default='build', help='where objects go (default build)')
p.add_argument('--ninja-file', default='build.ninja', help='the file written (default build.ninja)')
p.add_argument('--install-deps', nargs='?', const='lib', choices=sorted(LEVELS),
               help='apt-get install the Debian packages missing: lib (the default: the library, '
               'its tools, the host suite), test (and the Soft-RoCE tier), bench (and UCX for '
               'the side-by-side benchmark), all')
args = p.parse_args()
B = args.builddir
VERSION = '.'.join(re.search(rf'#define ODPX_VERSION_{k} (\d+)', open('lib/odpx.h').read()).group(1)
                   for k in ('MAJOR', 'MINOR', 'PATCH'))
SONAME = 'libodpx.so.' + VERSION.split('.')[0]


def multiarch():
    for cmd in ([args.cc, '-print-multiarch'], ['dpkg-architecture', '-qDEB_HOST_MULTIARCH']):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError:
            continue
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    return None


def under_prefix(d):
    return d if os.path.isabs(d) else os.path.join(args.prefix, d)


if args.libdir is None:
    args.libdir = 'lib'
    if os.path.normpath(args.prefix) == '/usr' and multiarch():
        args.libdir = 'lib/' + multiarch()
libdir, includedir, mandir, bindir = map(under_prefix, (args.libdir, args.includedir, args.mandir,
                                                        args.bindir))
if args.asan and args.tsan:
    sys.exit('configure.py: --asan and --tsan cannot be combined')


def missing_packages(want):
    out = subprocess.run(['dpkg-query', '-W', '-f', '${Package} ${db:Status-Status}\\n'] + want,
                         capture_output=True, text=True).stdout
    have = {l.split()[0] for l in out.splitlines() if l.endswith(' installed')}
    return [d for d in want if d not in have]


if shutil.which('dpkg-query'):
    miss = missing_packages([d for lv in LEVELS[args.install_deps or 'lib'] for d in DEBIAN[lv]])
    line = 'apt-get install -y --no-install-recommends ' + ' '.join(miss)
    if miss and args.install_deps:
        env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
        subprocess.run(['apt-get', 'update', '-q'], check=True, env=env)
        subprocess.run(shlex.split(line) + ['-q', '-o', 'DPkg::Lock::Timeout=600'],
                       check=True, env=env)
    elif miss:
        print('configure.py: missing Debian packages; run:\n  ' + line)


def pkg(name, required, level=''):
    r = subprocess.run(['pkg-config', '--cflags', '--libs', name], capture_output=True, text=True)
    if r.returncode:
        msg = f'configure.py: {name} not found by pkg-config (Debian: ./configure.py --install-deps{level})'
        if required:
            sys.exit(msg)
        print(msg + '; building without it')
        return None
    return r.stdout.split()


uring = pkg('liburing', True)
verbs = pkg('libibverbs', False)
mnl = pkg('libmnl', False)
ucx = pkg('ucx-ucs', False, '=bench')
ompi = pkg('ompi-c', False, '=test')
fabric = pkg('libfabric', False, '=test')

cflags = ['-std=gnu11', '-Wall', '-Wextra', '-Wno-unused-parameter', '-D_GNU_SOURCE', '-fPIC',
          '-fvisibility=hidden', '-g', '-Ilib', '-I' + B]
ldflags = []
if args.debug:
    cflags += ['-O0']
else:
    cflags += ['-O2']
if args.asan:
    cflags += ['-fsanitize=address,undefined', '-fno-omit-frame-pointer', '-fno-sanitize-recover=undefined']
    ldflags += ['-fsanitize=address,undefined']
if args.tsan:
    # TSan does not model atomic_thread_fence (the seqlock's read side): every
    # location those fences order is itself an atomic, so no plain access escapes it
    cflags += ['-fsanitize=thread', '-O1']
    ldflags += ['-fsanitize=thread']
# the environment's flags come last, so that they win (Debian's hardening flags, say)
cflags += shlex.split(os.environ.get('CPPFLAGS', '')) + shlex.split(os.environ.get('CFLAGS', ''))
ldflags += shlex.split(os.environ.get('LDFLAGS', ''))


def probe(code, extra=()):
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, 'p.c')
        open(src, 'w').write(code)
        return subprocess.run([args.cc, '-c', src, '-o', os.path.join(d, 'p.o')] + list(extra),
                              capture_output=True).returncode == 0


if not probe('int main(void) { return 0; }'):
    sys.exit(f'configure.py: the C compiler {args.cc!r} does not work')
if args.tsan and probe('int x;', ['-Wno-tsan', '-Werror']):
    cflags += ['-Wno-tsan']	# gcc's warning of the fences above; clang has none
os.makedirs(B, exist_ok=True)
config = {
    'ODPX_HAVE_VERBS': verbs is not None,
    'ODPX_HAVE_MNL': mnl is not None,
    'HAVE_UFFD_WP_ASYNC': probe('#include <linux/userfaultfd.h>\nint x = UFFD_FEATURE_WP_ASYNC;'),
    'HAVE_PROCMAP_QUERY': probe('#include <linux/fs.h>\nint x = PROCMAP_QUERY;'),
    # libfabric's memory monitor import extension (1.14 and later): the header alone,
    # libodpx never links libfabric (lib/fabric_monitor.c)
    'ODPX_HAVE_FABRIC': fabric is not None and probe(
        '#include <rdma/fabric.h>\n#include <rdma/fi_ext.h>\n'
        'struct fid_mem_monitor m; struct fi_ops_mem_notify n; int x = FI_CLASS_MEM_MONITOR;',
        [f for f in fabric if f.startswith('-I')]),
}
if fabric is not None and not config['ODPX_HAVE_FABRIC']:
    print('configure.py: rdma/fi_ext.h has no memory monitor import extension (libfabric 1.14 or '
          'later); building without odpx_fabric_monitor_import()')
    fabric = None
with open(f'{B}/config.h.tmp', 'w') as f:
    f.write('/* written by configure.py */\n')
    for k, v in config.items():
        f.write(f'#define {k} 1\n' if v else f'/* #undef {k} */\n')
os.replace(f'{B}/config.h.tmp', f'{B}/config.h')


class Writer:
    """The smallest ninja writer that will do."""
    def __init__(self):
        self.lines = []

    def var(self, k, v):
        self.lines.append(f'{k} = {v}')

    def rule(self, name, command, **kw):
        self.lines.append(f'rule {name}\n  command = {command}')
        self.lines += [f'  {k} = {v}' for k, v in kw.items()]

    def build(self, outs, rule, ins=(), implicit=(), order=(), **kw):
        outs = [outs] if isinstance(outs, str) else outs
        ins = [ins] if isinstance(ins, str) else ins
        line = f'build {" ".join(outs)}: {rule} {" ".join(ins)}'
        if implicit:
            line += ' | ' + ' '.join(implicit)
        if order:
            line += ' || ' + ' '.join(order)
        self.lines.append(line)
        self.lines += [f'  {k} = {v}' for k, v in kw.items()]
        return outs


def srcs(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith('.c'))


n = Writer()
n.var('ninja_required_version', '1.8')
n.var('cc', args.cc)
n.var('cflags', ' '.join(cflags))
n.var('ldflags', ' '.join(ldflags))
n.var('libs', ' '.join(uring + (verbs or []) + (mnl or []) + ['-lpthread']))
n.rule('cc', '$cc -MMD -MF $out.d $cflags $extra -c $in -o $out', depfile='$out.d', deps='gcc',
       description='CC $out')
n.rule('ar', 'rm -f $out && ar crs $out $in', description='AR $out')
n.rule('relocate', '$cc -r -nostdlib -o $out.tmp $in && objcopy --localize-hidden $out.tmp $out && rm -f $out.tmp',
       description='LD -r $out')
n.rule('so', f'$cc -shared -Wl,--version-script=lib/odpx.map -Wl,-soname,{SONAME} $ldflags '
       '-o $out $in $libs', description='SO $out')
n.rule('symlink', 'ln -sf $target $out', description='LN $out')
n.rule('link', '$cc $ldflags -o $out $in $libs $extralibs', description='LINK $out')
# a re-run sees the flags this run saw, whatever the environment of the ninja that runs it
envflags = ' '.join(f'{k}={shlex.quote(os.environ.get(k, ""))}' for k in ('CPPFLAGS', 'CFLAGS', 'LDFLAGS'))
n.rule('configure', f'env {envflags} {sys.executable} configure.py {" ".join(shlex.quote(a) for a in sys.argv[1:] if not a.startswith("--install-deps"))}',
       generator='1', description='CONFIGURE')
n.rule('run', '$cmd', pool='console', description='$desc')

# The library: lib/, uffd/, and the pure logic of sysfs-stats/ it runs (the segment
# files' protocol, the device counter sources with RDMA netlink's per-MR statistics, the
# thrash detector).  odpstat's own code (odpstat.c, main-*) is the tool's alone.
stats_in_lib = ['sysfs-stats/shm.c', 'sysfs-stats/sources.c', 'sysfs-stats/netlink.c',
                'sysfs-stats/thrash.c']
lib_srcs = srcs('lib') + srcs('uffd') + stats_in_lib
lib_srcs = [s for s in lib_srcs if not os.path.basename(s).startswith('main-')]
if verbs is None:
    lib_srcs = [s for s in lib_srcs if 'verbs' not in os.path.basename(s)]
# sysfs-stats/ sees the library through odpx.h and segment.h only: internal.h refuses it
def cc(s):
    extra = {'extra': '-DODPX_STATS_TOOL'} if s.startswith('sysfs-stats/') else {}
    return n.build(f'{B}/obj/{s[:-2]}.o', 'cc', s, order=[f'{B}/config.h'], **extra)


objs = [cc(s)[0] for s in lib_srcs]
tool_objs = [cc(s)[0] for s in srcs('sysfs-stats')
             if s not in stats_in_lib and not os.path.basename(s).startswith('main-')]
n.build(f'{B}/config.h', 'phony')
# libodpx.a is one relocatable object whose hidden symbols (everything but ODPX_EXPORT)
# are made local: a static link sees the odpx_ API and nothing else.  Tests and
# benchmarks that reach inside link the raw objects (libodpx-internal.a, never installed).
n.build(f'{B}/obj/libodpx.o', 'relocate', objs)
n.build(f'{B}/libodpx.a', 'ar', f'{B}/obj/libodpx.o')
n.build(f'{B}/libodpx-internal.a', 'ar', objs)
n.build(f'{B}/libodpstat-internal.a', 'ar', tool_objs)
internal = [f'{B}/libodpstat-internal.a', f'{B}/libodpx-internal.a']
n.build(f'{B}/libodpx.so.{VERSION}', 'so', objs, implicit=['lib/odpx.map'])
n.build(f'{B}/{SONAME}', 'symlink', f'{B}/libodpx.so.{VERSION}', target=f'libodpx.so.{VERSION}')
n.build(f'{B}/libodpx.so', 'symlink', f'{B}/{SONAME}', target=SONAME)
shared = [f'{B}/libodpx.so.{VERSION}', f'{B}/{SONAME}', f'{B}/libodpx.so']

# libodpx-preload.so (preload/): the library's objects behind libibverbs' registration
# symbols, exported with their versions and nothing else; not under a sanitizer, whose
# runtime would have to be preloaded before it into every program
preload = []
if verbs is not None and not (args.asan or args.tsan):
    n.rule('preload_so', '$cc -shared -Wl,--version-script=preload/preload.map '
           '-Wl,-soname,libodpx-preload.so $ldflags -o $out $in $libs -ldl',
           description='SO $out')
    # odpx-run looks for the drop-in beside itself, then where ninja install puts it
    n.rule('subst_libdir', 'sed -e s,@LIBDIR@,$libdir, $in > $out && chmod 755 $out',
           description='GEN $out')
    po = n.build(f'{B}/obj/preload/preload.o', 'cc', 'preload/preload.c', order=[f'{B}/config.h'])
    preload += n.build(f'{B}/libodpx-preload.so', 'preload_so', po + objs,
                       implicit=['preload/preload.map'])
    preload += n.build(f'{B}/odpx-run', 'subst_libdir', 'preload/odpx-run', implicit=['configure.py'],
                       libdir=libdir)
    # plain verbs programs (they know nothing of odpx) that the drop-in is tested with
    for s in sorted(f for f in os.listdir('preload') if f.startswith('prog-') and f.endswith('.c')):
        o = n.build(f'{B}/obj/preload/{s[:-2]}.o', 'cc', f'preload/{s}', order=[f'{B}/config.h'])
        preload += n.build(f'{B}/{s[5:-2]}', 'link', o, extralibs=' '.join(verbs))
    # the MPI ping-pong of the two-guest MPI job (tests/vm/pair-mpi.sh), built against the
    # host's Open MPI and run against the guest's: the two share libmpi.so.40, and -fPIC
    # (last, so that no CFLAGS undo it) reaches MPI_COMM_WORLD and the datatypes through
    # the GOT instead of copying objects whose size differs between Open MPI releases
    if ompi is not None:
        o = n.build(f'{B}/obj/preload/mpi-pingpong.o', 'cc', 'preload/mpi-pingpong.c',
                    order=[f'{B}/config.h'],
                    extra=' '.join([f for f in ompi if f.startswith('-I')] + ['-fPIC']))
        preload += n.build(f'{B}/mpi-pingpong', 'link', o, libs='',
                           extralibs=' '.join(f for f in ompi if not f.startswith('-I')))

tests, dev_tests, benches = [], [], []
for s in srcs('tests'):
    name = os.path.basename(s)[:-2]
    if name.startswith('dev-') and verbs is None:
        continue
    if name.startswith(('preload-', 'dev-preload-')) and not preload:
        continue
    # the tests of libfabric's import link libfabric; libodpx does not
    is_fabric = 'fabric' in name
    if is_fabric and fabric is None:
        continue
    o = n.build(f'{B}/obj/{s[:-2]}.o', 'cc', s, order=[f'{B}/config.h'])
    # a test of the public API alone links the archive applications link
    public = not re.search(r'#include "(?!(test|dev-util|odpx)\.h")', open(s).read())
    t = n.build(f'{B}/tests/{name}', 'link', o + ([f'{B}/libodpx.a'] if public else internal),
                **({'extralibs': ' '.join(fabric)} if is_fabric else {}))[0]
    (dev_tests if name.startswith('dev-') else tests).append(t)
scripts = sorted(f'tests/{f}' for f in os.listdir('tests') if f.endswith('.sh') and f != 'run-tests.sh')
for s in srcs('bench'):
    name = os.path.basename(s)[:-2]
    extra = {}
    if name.startswith('ucx-'):
        if ucx is None:
            continue
        extra = dict(extralibs=' '.join(ucx))
    o = n.build(f'{B}/obj/{s[:-2]}.o', 'cc', s, order=[f'{B}/config.h'])
    benches.append(n.build(f'{B}/{name}', 'link', o + internal, **extra)[0])
tools = []
for s in (srcs('sysfs-stats') if os.path.isdir('sysfs-stats') else []):
    if os.path.basename(s).startswith('main-'):
        name = os.path.basename(s)[5:-2]
        o = cc(s)
        tools.append(n.build(f'{B}/{name}', 'link', o + tool_objs + [f'{B}/obj/{s[:-2]}.o' for s in stats_in_lib]
                             + [f'{B}/libodpx.a'])[0])

# odpx.pc: a static link needs every library the archive calls into, and a program
# linked with a sanitizer build of odpx needs the sanitizer's runtime
requires = ['liburing'] + (['libibverbs'] if verbs else []) + (['libmnl'] if mnl else [])
with open(f'{B}/odpx.pc.tmp', 'w') as f:
    f.write(open('lib/odpx.pc.in').read().replace('@PREFIX@', args.prefix)
            .replace('@LIBDIR@', libdir).replace('@INCLUDEDIR@', includedir)
            .replace('@VERSION@', VERSION).replace('@REQUIRES_PRIVATE@', ', '.join(requires))
            .replace('@SANITIZE@', ''.join(' ' + f for f in ldflags if f.startswith('-fsanitize'))))
os.replace(f'{B}/odpx.pc.tmp', f'{B}/odpx.pc')

# install.sh and uninstall.sh honour DESTDIR; ninja install and ninja uninstall run them
mans = sorted(os.path.join('docs/man', f) for f in os.listdir('docs/man') if re.search(r'\.[137]$', f))
files = [('644', 'lib/odpx.h', includedir), ('644', f'{B}/libodpx.a', libdir),
         ('755', f'{B}/libodpx.so.{VERSION}', libdir), ('644', f'{B}/odpx.pc', libdir + '/pkgconfig')]
files += [('755', t, bindir) for t in tools]
files += [('755', p, libdir if p.endswith('.so') else bindir) for p in preload
          if p.endswith(('/libodpx-preload.so', '/odpx-run'))]
files += [('644', m, f'{mandir}/man{m[-1]}') for m in mans]
links = [(f'libodpx.so.{VERSION}', f'{libdir}/{SONAME}'), (SONAME, f'{libdir}/libodpx.so')]
q = shlex.quote
with open(f'{B}/install.sh', 'w') as f:
    f.write('#!/bin/sh\n# written by configure.py: DESTDIR=dir sh install.sh stages the install there\n'
            'set -e\n')
    for mode, src, d in files:
        f.write(f'install -D -m{mode} {q(src)} "$DESTDIR"{q(d + "/" + os.path.basename(src))}\n')
    for target, name in links:
        f.write(f'ln -sfn {q(target)} "$DESTDIR"{q(name)}\n')
with open(f'{B}/uninstall.sh', 'w') as f:
    f.write('#!/bin/sh\n# written by configure.py: removes what install.sh installed\n')
    for _, src, d in files:
        f.write(f'rm -f "$DESTDIR"{q(d + "/" + os.path.basename(src))}\n')
    for _, name in links:
        f.write(f'rm -f "$DESTDIR"{q(name)}\n')

lib = [f'{B}/libodpx.a'] + shared + [f'{B}/odpx.pc']
everything = lib + tests + dev_tests + benches + tools + preload
n.build('all', 'phony', everything)
n.build('bench', 'phony', benches)
paging = [b for b in benches if b.endswith('/odpx-paging')]	# tests/paging-quick.sh runs it
n.build('test', 'run', tests + dev_tests + scripts + tools + paging + preload + lib,
        cmd=f'TEST_BUILDDIR={os.path.abspath(B)} tests/run-tests.sh ' + ' '.join(tests + dev_tests + scripts), desc='TEST host suite')
n.build('test-vm', 'run', dev_tests + tests + tools + paging + preload,
        cmd=(f'ODPX_VM_PAGING={paging[0]} ODPX_VM_OUT={B}/vm-out ' if paging else '') +
            'tests/vm/odpx-vm test ' + ''.join(f'--with {p} ' for p in preload + (tools if preload else [])) +
            ' '.join(dev_tests) +
            (' && tests/vm/odpx-vm pair ' + ''.join(f'--with {p} ' for p in preload) + 'tests/vm/pair-preload.sh'
             if preload else '') +
            # the MPI job across the guests needs mpi-pingpong: without Open MPI's headers
            # the tier fails rather than leave it out
            (' && tests/vm/odpx-vm pair ' + ''.join(f'--with {p} ' for p in preload) + 'tests/vm/pair-mpi.sh'
             if preload and ompi is not None else
             ' && echo "test-vm: no mpi-pingpong for tests/vm/pair-mpi.sh: ompi-c not found by '
             'pkg-config (Debian: ./configure.py --install-deps=test)" && false' if preload else ''),
        desc='TEST device tier (Soft-RoCE guest)')
n.build('install', 'run', lib + tools + mans + preload, cmd=f'sh {B}/install.sh',
        desc='INSTALL ' + args.prefix)
n.build('uninstall', 'run', cmd=f'sh {B}/uninstall.sh', desc='UNINSTALL ' + args.prefix)
n.build(args.ninja_file, 'configure', implicit=['configure.py', 'lib/odpx.h', 'lib/odpx.pc.in', 'docs/man'])
# plain ninja: the library, the tools, the drop-in and pagebench with its workload programs
# (the README's main job); ninja all adds the tests and the UCX side-by-side benchmark
n.lines.append('default ' + ' '.join(lib + tools + [b for b in benches if '/ucx-' not in b] +
                                     [p for p in preload if p.endswith(('/libodpx-preload.so', '/odpx-run'))]))
with open(args.ninja_file + '.tmp', 'w') as f:
    f.write('# generated by configure.py; edit that instead\n' + '\n'.join(n.lines) + '\n')
os.replace(args.ninja_file + '.tmp', args.ninja_file)
mode = 'asan+ubsan' if args.asan else 'tsan' if args.tsan else 'debug' if args.debug else 'release'
print(f'configure.py: {mode} build, cc={args.cc}, verbs={"yes" if verbs else "no"}, '
      f'ucx-bench={"yes" if ucx else "no"}, prefix={args.prefix}, libdir={libdir}; now run ninja')
