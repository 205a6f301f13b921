/* CPU sets, and the one parser of the kernel's cpu-list syntax (deviceplugin/model/cpulist.py is the daemon's twin).
 *
 * Grammar (the kernel's bitmap_parselist): comma-separated groups, each N, N-M or N-M:USED/GROUP (a
 * stride: in every GROUP CPUs from N, the first USED are taken), in any order. Two forms:
 * - CPU_LIST_ENV, what the pinner takes in CMK_CPUS_* and a hook's --cpus: N and N-M only, no padding,
 *   not empty;
 * - CPU_LIST_KERNEL, what cpuset, sysfs and the infra record files hold: NUL bytes dropped, blanks around
 *   the list, a group and a number allowed, strides taken, and empty means no CPUs.
 * Every CPU number is at most 9 ASCII digits and below MAX_CPUS.
 */
#ifndef CMK_CPULIST_H
#define CMK_CPULIST_H

#include <stddef.h>

#include "cmk_generated.h"
#include "strbuf.h"

#define WORD_BITS (8 * sizeof(unsigned long))
#define MASK_WORDS (MAX_CPUS / WORD_BITS)

/* The kernel's cpu_set_t layout, so it goes to sched_setaffinity as it is. */
typedef struct {
    unsigned long w[MASK_WORDS];
} cpuset;

static inline int cs_has(const cpuset *s, unsigned cpu)
{
    return (int)((s->w[cpu / WORD_BITS] >> (cpu % WORD_BITS)) & 1UL);
}

static inline void cs_add(cpuset *s, unsigned cpu)
{
    s->w[cpu / WORD_BITS] |= 1UL << (cpu % WORD_BITS);
}

/* 1 if every CPU of a is in b. */
int cs_within(const cpuset *a, const cpuset *b);
int cs_empty(const cpuset *a);
/* FNV-1a over the words, to find equal sets quickly. */
unsigned long cs_hash(const cpuset *s);
/* CPUs in the kernel's list form (0-2,5), ascending. */
void s_ranges(str *s, const cpuset *set);

enum cpu_list_form { CPU_LIST_ENV, CPU_LIST_KERNEL };

/* Adds the CPUs of [text, text+n) in `form` to set; 0, or -1 with the reason (e.g. "'x' is not a CPU
 * number") in *detail and set partly filled. */
int parse_cpu_list(const char *text, size_t n, enum cpu_list_form form, cpuset *set, str *detail);
/* A CMK_CPUS_* or --cpus value (the env form) named `name` into cpus; 0, or -1 with
 * "NAME='RAW' is not a cpu list: DETAIL (LIST_HINT)" appended to msg. */
int parse_cpus_value(const char *name, const char *raw, cpuset *cpus, str *msg);
/* A sysfs hex mask (0000ff0f,00000000: 32-bit words, most significant first; 0x allowed) into set; 0, or -1
 * for no hex digits, another character, or a CPU at or above MAX_CPUS. */
int parse_cpu_mask(const char *text, cpuset *set);

#endif
