// Hot CPU loops are compiled three times (baseline x86-64, AVX2+FMA, AVX-512)
// and the best one the running CPU supports is picked at load time (GCC
// target_clones / ifunc), so one binary is fast on new machines and still
// runs on old ones. Put it on plain (non-template, non-inline) functions.
#pragma once

// Not under the sanitizers: their instrumentation of the ifunc resolvers,
// which run while the dynamic linker relocates librig, crashes ThreadSanitizer
// builds there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define RIG_CPU_KERNEL __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define RIG_CPU_KERNEL
#endif
