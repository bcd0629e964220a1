/*
 * glibc_shim.c: the six C23 entry points (glibc 2.38) that Debian's libnccl.so.2
 * references, defined on top of the classic functions that Debian 12's glibc 2.36 has.
 * For the decimal and hexadecimal input NCCL parses they behave identically.
 * Built and linked into the test copy of libnccl by headers/fetch.sh; never shipped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int __isoc23_sscanf(const char *s, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	int n = vsscanf(s, fmt, ap);
	va_end(ap);
	return n;
}

int __isoc23_fscanf(FILE *f, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	int n = vfscanf(f, fmt, ap);
	va_end(ap);
	return n;
}

long __isoc23_strtol(const char *s, char **end, int base) { return strtol(s, end, base); }
long long __isoc23_strtoll(const char *s, char **end, int base) { return strtoll(s, end, base); }
unsigned long __isoc23_strtoul(const char *s, char **end, int base) { return strtoul(s, end, base); }
unsigned long long __isoc23_strtoull(const char *s, char **end, int base) { return strtoull(s, end, base); }
