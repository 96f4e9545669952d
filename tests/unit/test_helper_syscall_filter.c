/* SPDX-License-Identifier: Apache-2.0 */
/* The filter every exec loads is libseccomp's binary tree of syscall
 * numbers (SCMP_FLTATR_CTL_OPTIMIZE 2, a speed-up: helper/syscall_filter.c).
 * The tree must decide exactly as the default list of tests built from
 * the same rules: both programs are run here, by a classic BPF interpreter
 * of this file's own, on every syscall number of the native, i386 and x32
 * ABIs and on argument values at the edges of each rule, and must give
 * the same action for each. A libseccomp that built a wrong tree fails it;
 * so does an interpreter that reads nothing (the known decisions below).
 * helper.syscalls checks the decisions themselves on the kernel, from
 * inside a sandbox. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "syscall_filter.h"
#include "util.h"

/* The kernel's struct seccomp_data, as the filter reads it. */
struct data {
	int32_t nr;
	uint32_t arch;
	uint64_t ip;
	uint64_t args[6];
};

static bool bad_insn;

/* Runs prog on d: the 32-bit value it returns, or 0 with bad_insn set for
 * an instruction seccomp's filters do not use (so nothing passes unread). */
static uint32_t run(const struct sock_fprog *prog, const struct data *d)
{
	uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0};
	const unsigned char *bytes = (const unsigned char *)d;

	for (size_t pc = 0; pc < prog->len; pc++) {
		const struct sock_filter *f = &prog->filter[pc];
		uint32_t src = BPF_SRC(f->code) == BPF_X ? x : f->k;
		bool jump;

		switch (BPF_CLASS(f->code)) {
		case BPF_LD:
			if (BPF_MODE(f->code) == BPF_ABS && BPF_SIZE(f->code) == BPF_W &&
			    f->k % 4 == 0 && f->k + 4 <= sizeof(*d))
				memcpy(&a, bytes + f->k, 4);
			else if (BPF_MODE(f->code) == BPF_IMM)
				a = f->k;
			else if (BPF_MODE(f->code) == BPF_MEM && f->k < BPF_MEMWORDS)
				a = mem[f->k];
			else
				goto bad;
			break;
		case BPF_LDX:
			if (BPF_MODE(f->code) == BPF_IMM)
				x = f->k;
			else if (BPF_MODE(f->code) == BPF_MEM && f->k < BPF_MEMWORDS)
				x = mem[f->k];
			else
				goto bad;
			break;
		case BPF_ST:
		case BPF_STX:
			if (f->k >= BPF_MEMWORDS)
				goto bad;
			mem[f->k] = BPF_CLASS(f->code) == BPF_ST ? a : x;
			break;
		case BPF_ALU:
			switch (BPF_OP(f->code)) {
			case BPF_AND:
				a &= src;
				break;
			case BPF_OR:
				a |= src;
				break;
			case BPF_ADD:
				a += src;
				break;
			case BPF_SUB:
				a -= src;
				break;
			case BPF_XOR:
				a ^= src;
				break;
			case BPF_LSH:
				a = src < 32 ? a << src : 0;
				break;
			case BPF_RSH:
				a = src < 32 ? a >> src : 0;
				break;
			default:
				goto bad;
			}
			break;
		case BPF_JMP:
			switch (BPF_OP(f->code)) {
			case BPF_JA:
				pc += f->k;
				continue;
			case BPF_JEQ:
				jump = a == src;
				break;
			case BPF_JGT:
				jump = a > src;
				break;
			case BPF_JGE:
				jump = a >= src;
				break;
			case BPF_JSET:
				jump = (a & src) != 0;
				break;
			default:
				goto bad;
			}
			pc += jump ? f->jt : f->jf;
			break;
		case BPF_RET:
			return BPF_RVAL(f->code) == BPF_A ? a : f->k;
		case BPF_MISC:
			if (BPF_MISCOP(f->code) == BPF_TAX)
				x = a;
			else
				a = x;
			break;
		default:
			goto bad;
		}
	}
bad:
	bad_insn = true;
	return 0;
}

static void export(enum sbx_filter_shape shape, struct sock_fprog *prog)
{
	struct sbx_err err;
	int p[2];

	if (pipe(p) < 0) {
		perror("pipe");
		exit(1);
	}
	/* A few KiB: the pipe holds it before anyone reads. */
	int rc = sbx_seccomp_export_bpf_shaped(p[1], shape, &err);
	close(p[1]);
	if (rc < 0 || sbx_seccomp_read_bpf(p[0], prog, &err) < 0) {
		fprintf(stderr, "export: %s\n", err.msg);
		exit(1);
	}
	close(p[0]);
}

/* A small generator of its own: the same values every run. */
static uint64_t next_random(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return *s ^ (*s >> 29);
}

int main(void)
{
	struct sock_fprog tree, list;

	export(SBX_FILTER_TREE, &tree);
	export(SBX_FILTER_LIST, &list);

	/* The interpreter reads the programs: decisions known from the rules. */
	static const struct {
		const char *what;
		uint32_t arch;
		int32_t nr;
		uint64_t a0, a1;
		uint32_t want;
	} known[] = {
	    {"read", AUDIT_ARCH_X86_64, SYS_read, 0, 0, SECCOMP_RET_ALLOW},
	    {"mount", AUDIT_ARCH_X86_64, SYS_mount, 0, 0, SECCOMP_RET_ERRNO | EPERM},
	    {"clone(CLONE_NEWUSER)", AUDIT_ARCH_X86_64, SYS_clone, CLONE_NEWUSER, 0,
	     SECCOMP_RET_ERRNO | EPERM},
	    {"clone(SIGCHLD)", AUDIT_ARCH_X86_64, SYS_clone, 17, 0, SECCOMP_RET_ALLOW},
	    {"ioctl(TIOCSTI)", AUDIT_ARCH_X86_64, SYS_ioctl, 0, TIOCSTI, SECCOMP_RET_ERRNO | EPERM},
	    {"socket(AF_NETLINK)", AUDIT_ARCH_X86_64, SYS_socket, AF_NETLINK, 0,
	     SECCOMP_RET_ERRNO | EAFNOSUPPORT},
	    {"socket(AF_INET)", AUDIT_ARCH_X86_64, SYS_socket, AF_INET, 0, SECCOMP_RET_ALLOW},
	    {"clone3", AUDIT_ARCH_X86_64, SYS_clone3, 0, 0, SECCOMP_RET_ERRNO | ENOSYS},
	    {"i386 read", AUDIT_ARCH_I386, 3, 0, 0, SECCOMP_RET_KILL_PROCESS},
	    {"x32 read", AUDIT_ARCH_X86_64, 0x40000000, 0, 0, SECCOMP_RET_KILL_PROCESS},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(known); i++) {
		struct data d = {.nr = known[i].nr, .arch = known[i].arch};
		d.args[0] = known[i].a0;
		d.args[1] = known[i].a1;
		uint32_t got = run(&tree, &d);
		check(!bad_insn && got == known[i].want, "the tree: %s gives %#x (got %#x)",
		      known[i].what, known[i].want, got);
		got = run(&list, &d);
		check(!bad_insn && got == known[i].want, "the list: %s gives %#x (got %#x)",
		      known[i].what, known[i].want, got);
	}

	/* Argument values at the edges of the rules: each namespace flag,
	 * the ioctl requests and the socket families with high bits set,
	 * both sides of every personality bit, the pids the rules name, and
	 * every single bit. */
	uint64_t edges[256];
	size_t n_edges = 0;
	static const uint64_t named[] = {0,
					 1,
					 2,
					 0xffffffffULL,
					 0x7fffffffULL,
					 0x80000000ULL,
					 0xffffffff00000000ULL,
					 0x100000000ULL,
					 TIOCSTI,
					 TIOCLINUX,
					 (1ULL << 32) | TIOCSTI,
					 CLONE_NEWNS | 17,
					 CLONE_NEWUSER | CLONE_NEWPID,
					 CLONE_NEWTIME,
					 AF_INET6,
					 AF_INET6 + 1,
					 AF_NETLINK,
					 AF_PACKET,
					 (1ULL << 32) | AF_PACKET,
					 UINT64_MAX};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(named); i++)
		edges[n_edges++] = named[i];
	for (unsigned b = 0; b < 64; b++)
		edges[n_edges++] = 1ULL << b;
	for (unsigned b = 0; b < 32; b++) /* personality: bit b set, the next clear or set */
		edges[n_edges++] = (1ULL << b) | (1ULL << ((b + 2) % 32));
	for (uint64_t f = 3; f < 48; f++)
		edges[n_edges++] = f;

	static const uint32_t arches[] = {AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64,
					  0};
	uint64_t seed = 21, cases = 0, differ = 0;
	for (size_t ai = 0; ai < SBX_ARRAY_SIZE(arches); ai++)
		for (int64_t k = -2; k < 1200; k++) {
			/* 0..599 and, for x32, 0x40000000 + 0..599. */
			int32_t nr = k < 600 ? (int32_t)k : (int32_t)(0x40000000 + (k - 600));
			for (size_t e = 0; e <= 3 * n_edges + 20; e++) {
				struct data d = {.nr = nr, .arch = arches[ai]};
				if (e > 0 && e <= 3 * n_edges)
					d.args[(e - 1) % 3] = edges[(e - 1) / 3];
				else if (e > 3 * n_edges)
					for (int j = 0; j < 6; j++)
						d.args[j] =
						    next_random(&seed) % 2
							? edges[next_random(&seed) % n_edges]
							: next_random(&seed);
				uint32_t t = run(&tree, &d), l = run(&list, &d);
				cases++;
				if (t != l && differ++ < 5)
					fprintf(
					    stderr,
					    "# arch %#x nr %d args %#llx %#llx %#llx: tree %#x, "
					    "list %#x\n",
					    arches[ai], nr, (unsigned long long)d.args[0],
					    (unsigned long long)d.args[1],
					    (unsigned long long)d.args[2], t, l);
			}
		}
	check(!bad_insn, "every instruction of both programs is one the interpreter knows");
	check(differ == 0, "the tree decides as the list in all %llu cases (%llu differ)",
	      (unsigned long long)cases, (unsigned long long)differ);
	free(tree.filter);
	free(list.filter);
	return check_done();
}
