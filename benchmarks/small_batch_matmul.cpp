// Small-batch matmul microbenchmark and correctness check for ggml's CPU backend
// (patches/llama.cpp/0001-small-batch-matmul.patch).
//
// One ggml mul_mat W[k,m] (f16 / q8_0 / q4_0) x X[k,n] (f32), n = 1..nmax; prints the minimum time over
// `reps` runs and the ratio to n = 1. `check` compares, for n = 1..16, the default path (patched kernel)
// and the pre-patch path (cplan.use_ref = true, which the patch honours) against a double-precision
// reference computed from the dequantized weights and the activations as the kernels see them
// (rounded to the vec_dot type: f16 for f16 weights, q8_0 for q8_0/q4_0 weights).
//
// Build: against any ggml built from the tree. With the patch, one build measures both paths (see `bench`).
//   Patched (own copy; the shared cache tree and its build dir stay read-only):
//     cp -r ~/.cache/mtp_llm/llama.cpp-0.3.36-832db0699007 /tmp/llp && rm -f /tmp/llp/.git
//     patch -d /tmp/llp -p1 < patches/llama.cpp/0001-small-batch-matmul.patch      # from the repo root
//     cmake -S /tmp/llp -B /tmp/llp-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF
//           -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
//     cmake --build /tmp/llp-build --target ggml-base ggml-cpu ggml -j2
//     g++ -O2 -std=c++17 benchmarks/small_batch_matmul.cpp -I/tmp/llp/ggml/include -L/tmp/llp-build/bin
//         -lggml -lggml-base -lggml-cpu -Wl,-rpath,/tmp/llp-build/bin -o /tmp/small_batch_matmul
//   Project's own (static) build, e.g. the unpatched cache: L=~/.cache/mtp_llm/llama.cpp-0.3.36-832db0699007-build/
//   Release-GNU-12.2.0/ggml/src; g++ -O2 -std=c++17 benchmarks/small_batch_matmul.cpp
//         -I~/.cache/mtp_llm/llama.cpp-0.3.36-832db0699007/ggml/include $L/libggml.a $L/libggml-cpu.a
//         $L/libggml-base.a -fopenmp -lpthread -o /tmp/small_batch_matmul
// Run:
//   /tmp/small_batch_matmul bench K M TYPE [THREADS=1] [NMAT=1] [REPS=21] [NMAX=8]
//       TYPE: f16 | q8_0 | q4_0 | q4_1. Compute-bound: K=M=2048 NMAT=1; memory-bound: K=M=4096 NMAT=16.
//       Each rep runs the patched path and the pre-patch path (cplan.use_ref = true) back to back; min over reps.
//       SMALL_BATCH_REF=1 times only the pre-patch path (e.g. against an unpatched build).
//   /tmp/small_batch_matmul check      (types x k in {96,256,768,800,2304,4096} x m x n=1..16 x threads 1,2)
#include "ggml.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

static ggml_type parse_type(const std::string & s) {
    if (s == "f16")  return GGML_TYPE_F16;
    if (s == "q8_0") return GGML_TYPE_Q8_0;
    if (s == "q4_0") return GGML_TYPE_Q4_0;
    if (s == "q4_1") return GGML_TYPE_Q4_1;
    fprintf(stderr, "unknown type %s\n", s.c_str());
    exit(1);
}

static void fill_weights(ggml_tensor * W, std::mt19937 & rng) {
    const int64_t k = W->ne[0], m = W->ne[1];
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> tmp(k);
    for (int64_t r = 0; r < m; ++r) {
        for (auto & v : tmp) v = u(rng);
        ggml_quantize_chunk(W->type, tmp.data(), (char *) W->data + r * W->nb[1], 0, 1, k, nullptr);
    }
}

static int bench(int argc, char ** argv) {
    if (argc < 5) { fprintf(stderr, "usage: bench K M TYPE [THREADS] [NMAT] [REPS] [NMAX]\n"); return 1; }
    const int k = atoi(argv[2]), m = atoi(argv[3]);
    const ggml_type t = parse_type(argv[4]);
    const int nthreads = argc > 5 ? atoi(argv[5]) : 1;
    const int nmat     = argc > 6 ? atoi(argv[6]) : 1;
    const int reps     = argc > 7 ? atoi(argv[7]) : 21;
    const int nmax     = argc > 8 ? atoi(argv[8]) : 8;
    const bool ref     = getenv("SMALL_BATCH_REF") && atoi(getenv("SMALL_BATCH_REF"));

    const size_t wsize = ggml_row_size(t, k) * (size_t) m * nmat;
    ggml_init_params ip = { wsize + 64u * 1024 * 1024, nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    std::mt19937 rng(42);
    std::vector<ggml_tensor *> W(nmat);
    for (int i = 0; i < nmat; ++i) {
        W[i] = ggml_new_tensor_2d(ctx, t, k, m);
        fill_weights(W[i], rng);
    }
    ggml_threadpool_params tpp = ggml_threadpool_params_default(nthreads);
    ggml_threadpool * tp = ggml_threadpool_new(&tpp);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    // each rep times the patched path (use_ref = false) and the pre-patch path (use_ref = true) back to back, so both
    // see the same machine load; min over reps. SMALL_BATCH_REF=1: pre-patch only (for a build without the patch).
    double base[2] = { 0, 0 };
    for (int n = 1; n <= nmax; ++n) {
        ggml_tensor * X = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
        for (int64_t j = 0; j < (int64_t) k * n; ++j) ((float *) X->data)[j] = u(rng);
        ggml_cgraph * gf = ggml_new_graph(ctx);
        for (int i = 0; i < nmat; ++i) ggml_build_forward_expand(gf, ggml_mul_mat(ctx, W[i], X));
        ggml_cplan plan = ggml_graph_plan(gf, nthreads, tp);
        std::vector<uint8_t> work(plan.work_size + 1);
        plan.work_data = work.data();
        double best[2] = { 1e30, 1e30 };
        for (int rep = -3; rep < reps; ++rep) {
            for (int mode = ref ? 1 : 0; mode < 2; ++mode) {
                plan.use_ref = mode == 1;
                auto t0 = std::chrono::steady_clock::now();
                ggml_graph_compute(gf, &plan);
                auto t1 = std::chrono::steady_clock::now();
                if (rep >= 0) best[mode] = std::min(best[mode], std::chrono::duration<double, std::milli>(t1 - t0).count());
            }
        }
        if (n == 1) { base[0] = best[0]; base[1] = best[1]; }
        if (ref) {
            printf("%s k=%d m=%d nmat=%d threads=%d n=%d: pre-patch %.3f ms (%.2fx)\n", ggml_type_name(t), k, m, nmat,
                   nthreads, n, best[1], best[1] / base[1]);
        } else {
            printf("%s k=%d m=%d nmat=%d threads=%d n=%d: pre-patch %.3f ms (%.2fx)  patched %.3f ms (%.2fx of patched n=1)  speedup %.2fx\n",
                   ggml_type_name(t), k, m, nmat, nthreads, n, best[1], best[1] / base[1], best[0], best[0] / base[0],
                   best[1] / best[0]);
        }
        fflush(stdout);
    }
    ggml_threadpool_free(tp);
    ggml_free(ctx);
    return 0;
}

// result of W x X with the given plan settings, into out (m x n, column-major as ggml's dst)
static void run_mm(ggml_tensor * W, const std::vector<float> & x, int n, int nthreads, bool use_ref, std::vector<float> & out) {
    const int64_t k = W->ne[0], m = W->ne[1];
    ggml_init_params ip = { 16u * 1024 * 1024 + (size_t) (k + m) * n * sizeof(float) * 2, nullptr, false };
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * X = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
    memcpy(X->data, x.data(), sizeof(float) * k * n);
    ggml_tensor * Y = ggml_mul_mat(ctx, W, X);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, Y);
    ggml_cplan plan = ggml_graph_plan(gf, nthreads, nullptr);
    plan.use_ref = use_ref;
    std::vector<uint8_t> work(plan.work_size + 1);
    plan.work_data = work.data();
    ggml_graph_compute(gf, &plan);
    out.assign((float *) Y->data, (float *) Y->data + m * n);
    ggml_free(ctx);
}

static int check() {
    const ggml_type types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1 };
    const int ks[] = { 96, 256, 768, 800, 2304, 4096 };  // 96, 800: odd block counts
    const int ms[] = { 1, 7, 64, 333 };
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    int failures = 0;
    for (ggml_type t : types) {
        const ggml_type vt = t == GGML_TYPE_F32 ? GGML_TYPE_F32
                           : t == GGML_TYPE_F16 ? GGML_TYPE_F16
                           : t == GGML_TYPE_Q4_1 ? GGML_TYPE_Q8_1 : GGML_TYPE_Q8_0;
        // batch invariance: each column of an n-column product (a verify pass) bit for bit the product
        // of that column alone (plain decoding); required of q8_0 and q4_1 (patch 0009) and f32 (patch 0010)
        const bool exact = t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_F32;
        // q8_0 and q4_1 also past 8 columns (several streams' verifies, in groups of 8: patch 0018)
        const int n_invariant = t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_1 ? 16 : 8;
        // q8_0 and q4_1 one-column products take the kernel too (patch 0028): their columns are compared with ggml's
        // own one-column path (vec_dot, use_ref), from n = 1
        const bool vec_dot_reference = t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_1;
        const int first_invariant = vec_dot_reference ? 1 : 2;
        int64_t inexact = 0;
        const auto * tt  = ggml_get_type_traits(t);
        const auto * vtt = ggml_get_type_traits(vt);
        double worst_new = 0, worst_old = 0, worst_diff = 0;
        for (int k : ks) for (int m : ms) {
            ggml_init_params ip = { ggml_row_size(t, k) * m + 1024 * 1024, nullptr, false };
            ggml_context * ctx = ggml_init(ip);
            ggml_tensor * W = ggml_new_tensor_2d(ctx, t, k, m);
            fill_weights(W, rng);
            std::vector<float> wf((size_t) k * m);
            for (int r = 0; r < m; ++r) {
                const char * row = (const char *) W->data + r * W->nb[1];
                if (t == GGML_TYPE_F32) {
                    memcpy(wf.data() + (size_t) r * k, row, sizeof(float) * k);
                } else {
                    tt->to_float(row, wf.data() + (size_t) r * k, k);
                }
            }
            for (int n = 1; n <= 16; ++n) {
                std::vector<float> x((size_t) k * n), xq((size_t) k * n);
                for (auto & v : x) v = u(rng);
                // activations as the kernels see them
                std::vector<uint8_t> qbuf(ggml_row_size(vt, k));
                for (int c = 0; c < n; ++c) {
                    if (vt == GGML_TYPE_F32) {
                        std::copy(x.begin() + (size_t) c * k, x.begin() + (size_t) (c + 1) * k, xq.begin() + (size_t) c * k);
                    } else if (vt == GGML_TYPE_F16) {
                        for (int j = 0; j < k; ++j) xq[(size_t) c * k + j] = ggml_fp16_to_fp32(ggml_fp32_to_fp16(x[(size_t) c * k + j]));
                    } else {
                        // the CPU backend's own quantizer, as used for src1 (rounding may differ from ggml_quantize_chunk)
                        ggml_get_type_traits_cpu(vt)->from_float(x.data() + (size_t) c * k, qbuf.data(), k);
                        if (vt == GGML_TYPE_Q8_1) {  // no to_float for q8_1: d * q per 36-byte block (d, s, 32 quants)
                            for (int j = 0; j < k; ++j) {
                                const uint8_t * blk = qbuf.data() + (size_t) (j / 32) * 36;
                                ggml_fp16_t d;
                                memcpy(&d, blk, sizeof(d));
                                xq[(size_t) c * k + j] = ggml_fp16_to_fp32(d) * (float) (int8_t) blk[4 + j % 32];
                            }
                        } else {
                            vtt->to_float(qbuf.data(), xq.data() + (size_t) c * k, k);
                        }
                    }
                }
                std::vector<double> ref((size_t) m * n);
                double scale = 0;
                for (int c = 0; c < n; ++c) for (int r = 0; r < m; ++r) {
                    double s = 0;
                    for (int j = 0; j < k; ++j) s += (double) wf[(size_t) r * k + j] * xq[(size_t) c * k + j];
                    ref[(size_t) c * m + r] = s;
                    scale = std::max(scale, std::fabs(s));
                }
                for (int nt = 1; nt <= 2; ++nt) {
                    std::vector<float> ynew, yold;
                    run_mm(W, x, n, nt, false, ynew);
                    run_mm(W, x, n, nt, true, yold);
                    double en = 0, eo = 0, ed = 0;
                    for (size_t i = 0; i < ref.size(); ++i) {
                        en = std::max(en, std::fabs(ynew[i] - ref[i]));
                        eo = std::max(eo, std::fabs(yold[i] - ref[i]));
                        ed = std::max(ed, std::fabs((double) ynew[i] - yold[i]));
                    }
                    // error relative to the largest |result| of the matrix (results near 0 make per-element ratios meaningless)
                    en /= scale; eo /= scale; ed /= scale;
                    worst_new = std::max(worst_new, en); worst_old = std::max(worst_old, eo); worst_diff = std::max(worst_diff, ed);
                    const bool bad = !(en <= std::max(4 * eo, 1e-6));
                    if (bad) {
                        ++failures;
                        printf("FAIL %s k=%d m=%d n=%d threads=%d: new %.3g old %.3g\n", ggml_type_name(t), k, m, n, nt, en, eo);
                    }
                    if (n >= first_invariant && n <= n_invariant) {
                        int64_t differ = 0;
                        for (int c = 0; c < n; ++c) {
                            std::vector<float> xc(x.begin() + (size_t) c * k, x.begin() + (size_t) (c + 1) * k), y1;
                            run_mm(W, xc, 1, nt, vec_dot_reference, y1);
                            differ += memcmp(y1.data(), ynew.data() + (size_t) c * m, sizeof(float) * m) != 0;
                        }
                        inexact += differ;
                        if (exact && differ) {
                            ++failures;
                            printf("FAIL %s k=%d m=%d n=%d threads=%d: %lld columns differ from their one-column product\n",
                                   ggml_type_name(t), k, m, n, nt, (long long) differ);
                        }
                    }
                }
            }
            ggml_free(ctx);
        }
        printf("%-5s max |err|/max|ref| over k in {96,256,768,800,2304,4096}, m in {1,7,64,333}, n=1..16, threads 1,2: "
               "patched %.2e, pre-patch %.2e, patched vs pre-patch %.2e; columns of n=%d..%d products unlike "
               "their one-column product: %lld\n", ggml_type_name(t), worst_new, worst_old, worst_diff, first_invariant,
               n_invariant,
               (long long) inexact);
    }
    printf(failures ? "check: %d FAILURES\n" : "check: all passed\n", failures);
    return failures ? 1 : 0;
}

int main(int argc, char ** argv) {
    ggml_cpu_init();
    if (argc >= 2 && !strcmp(argv[1], "bench")) return bench(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "check")) return check();
    fprintf(stderr, "usage: %s bench K M TYPE [THREADS=1] [NMAT=1] [REPS=21] [NMAX=8] | check\n", argv[0]);
    return 1;
}
