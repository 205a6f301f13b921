/* CPU sets and the cpu-list parser (cpulist.h).
 *
 * Built with -DTEST_PROGRAM_CPULIST it is a unit-test driver (util-linux's TEST_PROGRAM): see the end.
 */
#define _GNU_SOURCE
#include "cpulist.h"

#include <stdlib.h>
#include <string.h>

int cs_within(const cpuset *a, const cpuset *b)
{
    for (size_t i = 0; i < MASK_WORDS; i++)
        if (a->w[i] & ~b->w[i])
            return 0;
    return 1;
}

int cs_empty(const cpuset *a)
{
    for (size_t i = 0; i < MASK_WORDS; i++)
        if (a->w[i])
            return 0;
    return 1;
}

unsigned long cs_hash(const cpuset *s)
{
    unsigned long h = 1469598103934665603UL;
    for (unsigned w = 0; w < MASK_WORDS; w++)
        h = (h ^ s->w[w]) * 1099511628211UL;
    return h;
}

void s_ranges(str *s, const cpuset *set)
{
    int first = 1;
    for (unsigned c = 0; c < MAX_CPUS; c++) {
        if (!cs_has(set, c))
            continue;
        unsigned end = c;
        while (end + 1 < MAX_CPUS && cs_has(set, end + 1))
            end++;
        s_add(s, first ? "" : ",");
        if (end == c)
            s_addf(s, "%u", c);
        else
            s_addf(s, "%u-%u", c, end);
        first = 0;
        c = end;
    }
}

/* [*t, *end) without the blanks around it (the kernel form only). */
static void trim(const char **t, const char **end, enum cpu_list_form form)
{
    if (form == CPU_LIST_ENV)
        return;
    while (*t < *end && is_space(**t))
        (*t)++;
    while (*end > *t && is_space((*end)[-1]))
        (*end)--;
}

/* One CPU number (or a stride's USED or GROUP) of [t, end); 0, or -1 with the reason in detail. */
static int cpu_number(const char *t, const char *end, enum cpu_list_form form, unsigned *out, str *detail)
{
    trim(&t, &end, form);
    size_t n = (size_t)(end - t);
    if (n > 9 || !is_digits(t, n)) {
        s_add(detail, "'");
        s_shown_n(detail, t, n);
        s_add(detail, "' is not a CPU number");
        return -1;
    }
    unsigned long v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned long)(t[i] - '0');
    if (v >= MAX_CPUS) {
        s_addf(detail, "CPU %lu is out of range (0-%d)", v, MAX_CPUS - 1);
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

/* A stride's USED/GROUP of [t, end), as deviceplugin/model/cpulist.py words its refusals. */
static int stride(const char *t, const char *end, unsigned *used, unsigned *group, str *detail)
{
    const char *slash = memchr(t, '/', (size_t)(end - t));
    if (!slash) {
        s_add(detail, "stride '");
        s_shown_n(detail, t, (size_t)(end - t));
        s_add(detail, "' needs USED/GROUP");
        return -1;
    }
    if (cpu_number(t, slash, CPU_LIST_KERNEL, used, detail) ||
        cpu_number(slash + 1, end, CPU_LIST_KERNEL, group, detail))
        return -1;
    if (*used == 0 || *group == 0 || *used > *group) {
        s_add(detail, "stride '");
        s_shown_n(detail, t, (size_t)(end - t));
        s_add(detail, "' needs 0 < USED <= GROUP");
        return -1;
    }
    return 0;
}

/* One group (N, N-M, N-M:USED/GROUP) of [t, end) into set. */
static int cpu_group(const char *t, const char *end, enum cpu_list_form form, cpuset *set, str *detail)
{
    trim(&t, &end, form);
    if (t == end) {
        s_add(detail, "empty entry between commas");
        return -1;
    }
    const char *colon = form == CPU_LIST_KERNEL ? memchr(t, ':', (size_t)(end - t)) : NULL;
    const char *span_end = colon ? colon : end;
    const char *dash = memchr(t, '-', (size_t)(span_end - t));
    unsigned low, high, used = 1, group = 1;
    if (cpu_number(t, dash ? dash : span_end, form, &low, detail))
        return -1;
    high = low;
    if (dash && cpu_number(dash + 1, span_end, form, &high, detail))
        return -1;
    if (high < low) {
        s_add(detail, "range '");
        s_shown_n(detail, t, (size_t)(span_end - t));
        s_add(detail, "' runs backwards");
        return -1;
    }
    if (colon && colon + 1 < end && stride(colon + 1, end, &used, &group, detail))
        return -1; /* "N-M:" has no stride, as Python's partition(":") reads it */
    for (unsigned start = low; start <= high; start += group)
        for (unsigned c = start; c < start + used && c <= high; c++)
            cs_add(set, c);
    return 0;
}

int parse_cpu_list(const char *text, size_t n, enum cpu_list_form form, cpuset *set, str *detail)
{
    str kept = {0};
    if (form == CPU_LIST_KERNEL) { /* sysfs files may end in NULs */
        s_reserve(&kept, n);
        for (size_t i = 0; i < n; i++)
            if (text[i])
                kept.p[kept.len++] = text[i];
        kept.p[kept.len] = '\0';
        text = kept.p;
        n = kept.len;
    }
    const char *t = text, *end = text + n;
    trim(&t, &end, form);
    int status = 0;
    if (form == CPU_LIST_KERNEL && t == end) {
        free(kept.p);
        return 0; /* an empty cpuset */
    }
    for (;;) {
        const char *comma = memchr(t, ',', (size_t)(end - t));
        if ((status = cpu_group(t, comma ? comma : end, form, set, detail)) || !comma)
            break;
        t = comma + 1;
    }
    free(kept.p);
    return status;
}

int parse_cpus_value(const char *name, const char *raw, cpuset *cpus, str *msg)
{
    str detail = {0};
    int bad = parse_cpu_list(raw, strlen(raw), CPU_LIST_ENV, cpus, &detail);
    if (bad) {
        s_add(msg, name);
        s_add(msg, "='");
        s_shown(msg, raw);
        s_add(msg, "' is not a cpu list: ");
        s_addn(msg, detail.p, detail.len);
        s_add(msg, " (" LIST_HINT ")");
    }
    free(detail.p);
    return bad;
}

int parse_cpu_mask(const char *text, cpuset *set)
{
    const char *t = text;
    if (t[0] == '0' && (t[1] == 'x' || t[1] == 'X'))
        t += 2;
    unsigned bit = 0, digits = 0;
    int bad = 0;
    for (size_t i = strlen(t); i-- > 0 && !bad;) {
        char c = t[i];
        if (c == ',')
            continue;
        unsigned v = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16;
        bad = v == 16 || (v && bit >= MAX_CPUS);
        for (unsigned b = 0; b < 4 && !bad; b++)
            if (v >> b & 1)
                cs_add(set, bit + b);
        bit += 4;
        digits++;
    }
    return !bad && digits ? 0 : -1;
}

#ifdef TEST_PROGRAM_CPULIST
/* `cpulist-test list|env|mask` parses stdin (NULs and all) and prints the CPUs in list form, exit 0; or the
 * reason, exit 1. tests/pinner/test_native_units.py feeds it the case table of tests/unit/test_cpulist.py. */
#include <unistd.h>

int main(int argc, char **argv)
{
    static cpuset set;
    str in = {0}, out = {0};
    char buf[4096];
    ssize_t n;
    if (argc != 2)
        return 2;
    while ((n = read(0, buf, sizeof buf)) > 0)
        s_addn(&in, buf, (size_t)n);
    if (!in.p)
        s_addn(&in, "", 0);
    int bad;
    if (!strcmp(argv[1], "mask")) {
        str kept = {0}; /* as read_sysfs hands it over: NULs and blanks around it gone */
        const char *t = in.p, *end = in.p + in.len;
        while (t < end && is_space(*t))
            t++;
        while (end > t && (is_space(end[-1]) || !end[-1]))
            end--;
        s_addn(&kept, t, (size_t)(end - t));
        bad = *kept.p && parse_cpu_mask(kept.p, &set);
        if (bad)
            s_add(&out, "not a cpu mask");
    } else {
        bad = parse_cpu_list(in.p, in.len, strcmp(argv[1], "env") ? CPU_LIST_KERNEL : CPU_LIST_ENV, &set, &out);
    }
    if (!bad)
        s_ranges(&out, &set);
    s_add(&out, "\n");
    return write_all(1, out.p, out.len) ? 2 : bad ? 1 : 0;
}
#endif
