// Correctness check and microbenchmark for ggml's CPU_REPACK Q4_0 matmul (q4_0_8x8_q8_0 on AVX2/AVX512 x86) with a
// few src1 rows, the shape of an MTP / speculative verify pass (patches/llama.cpp/0002-repack-padded-gemm.patch).
//
// Unlike small_batch_matmul.cpp (plain memory), the weights live in the CPU backend's CPU_REPACK extra buffer type
// (ggml_backend_dev_get_extra_bufts), so ggml_backend_tensor_set repacks them at load exactly as llama.cpp's model
// loader does, and the matmul runs through repack.cpp's tensor_traits (forward_mul_mat: gemm / gemv).
//
// Build against a ggml build (shared libs, e.g. the build commands in patches/README.md), from the repo root:
//   g++ -O2 -std=c++17 benchmarks/repack_matmul.cpp -I/tmp/llq/ggml/include -L/tmp/llq-build/bin
//       -lggml -lggml-base -lggml-cpu -Wl,-rpath,/tmp/llq-build/bin -o /tmp/repack_matmul
// Run:
//   /tmp/repack_matmul check OUT.bin   k in {768,800,2304,4096} x m in {8,72,1000} x n = 1..8 x src1 planes {1,2}
//                                      x threads {1,2} (k = 800: not a multiple of QK_K); error vs a double-precision
//                                      reference (dequantized Q4_0 weights, activations rounded by the CPU backend's
//                                      Q8_0 quantizer); raw outputs written to OUT.bin
//   /tmp/repack_matmul cmp A.bin B.bin  max |A - B| / max |B| per (k, m, n, planes, threads) case, e.g. patched
//                                      build vs unpatched build (same seed, same cases)
//   /tmp/repack_matmul bench K M [THREADS=1] [NMAT=1] [REPS=31] [NMAX=8]
//                                      min time over REPS of NMAT independent K x M matmuls with n = 1..NMAX rows
//                                      (n interleaved within each rep), and the ratio to n = 1
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
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

static ggml_backend_buffer_type_t repack_buft() {
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    if (get_extra) {
        for (ggml_backend_buffer_type_t * b = get_extra(dev); b && *b; ++b) {
            if (std::string(ggml_backend_buft_name(*b)) == "CPU_REPACK") {
                return *b;
            }
        }
    }
    fprintf(stderr, "no CPU_REPACK buffer type\n");
    exit(1);
}

// nmat Q4_0 weight matrices [k, m] in a CPU_REPACK buffer; q4 holds the plain Q4_0 bytes of each
struct weights {
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buf = nullptr;
    std::vector<ggml_tensor *> w;
    std::vector<std::vector<uint8_t>> q4;

    weights(int64_t k, int64_t m, int nmat, std::mt19937 & rng) {
        ggml_init_params ip = { ggml_tensor_overhead() * (size_t) nmat + 1024, nullptr, true };
        ctx = ggml_init(ip);
        for (int i = 0; i < nmat; ++i) {
            w.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_0, k, m));
        }
        buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, repack_buft());
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> tmp(k * m);
        for (ggml_tensor * t : w) {
            if (t->extra == nullptr) {
                fprintf(stderr, "tensor %lld x %lld not repacked\n", (long long) k, (long long) m);
                exit(1);
            }
            for (auto & v : tmp) v = u(rng);
            std::vector<uint8_t> q(ggml_nbytes(t));
            ggml_quantize_chunk(GGML_TYPE_Q4_0, tmp.data(), q.data(), 0, m, k, nullptr);
            ggml_backend_tensor_set(t, q.data(), 0, q.size());   // repacks
            q4.push_back(std::move(q));
        }
    }
    ~weights() { ggml_backend_buffer_free(buf); ggml_free(ctx); }
};

// src1 [k, n, planes] and one mul_mat per weight matrix, in a CPU buffer
struct graph {
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buf = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * x = nullptr;
    std::vector<ggml_tensor *> out;

    graph(ggml_backend_t be, const weights & W, int64_t k, int64_t n, int64_t planes) {
        ggml_init_params ip = { ggml_tensor_overhead() * (W.w.size() + 2) + ggml_graph_overhead() + 1024, nullptr, true };
        ctx = ggml_init(ip);
        x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, n, planes);
        gf = ggml_new_graph(ctx);
        for (ggml_tensor * w : W.w) {
            out.push_back(ggml_mul_mat(ctx, w, x));
            ggml_build_forward_expand(gf, out.back());
        }
        buf = ggml_backend_alloc_ctx_tensors(ctx, be);
    }
    ~graph() { if (buf) ggml_backend_buffer_free(buf); ggml_free(ctx); }
};

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static int check(const char * path) {
    ggml_backend_t be = ggml_backend_cpu_init();
    FILE * f = fopen(path, "wb");
    if (!f) { perror(path); return 1; }
    std::mt19937 rng(1234);
    const auto * q4_tt = ggml_get_type_traits(GGML_TYPE_Q4_0);
    const auto * q8_tt = ggml_get_type_traits(GGML_TYPE_Q8_0);
    double worst = 0.0;
    printf("%6s %6s %2s %6s %7s %12s\n", "k", "m", "n", "planes", "threads", "err/max|ref|");
    for (int64_t k : {768, 800, 2304, 4096}) {
        for (int64_t m : {8, 72, 1000}) {
            weights W(k, m, 1, rng);
            std::vector<float> wf(k * m);
            q4_tt->to_float(W.q4[0].data(), wf.data(), k * m);
            for (int64_t planes : {1, 2}) {
                for (int64_t n = 1; n <= 8; ++n) {
                    const int64_t rows = n * planes;
                    std::vector<float> x(k * rows), xq(k * rows);
                    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
                    for (auto & v : x) v = u(rng);
                    std::vector<uint8_t> q8(ggml_row_size(GGML_TYPE_Q8_0, k) * rows);
                    for (int64_t r = 0; r < rows; ++r) {  // the CPU backend's own Q8_0 quantizer, as the kernels see x
                        ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float(x.data() + r * k, q8.data() + r * ggml_row_size(GGML_TYPE_Q8_0, k), k);
                    }
                    q8_tt->to_float(q8.data(), xq.data(), k * rows);
                    std::vector<double> ref(m * rows);
                    double refmax = 0.0;
                    for (int64_t r = 0; r < rows; ++r) {
                        for (int64_t i = 0; i < m; ++i) {
                            double s = 0.0;
                            for (int64_t j = 0; j < k; ++j) s += (double) wf[i * k + j] * xq[r * k + j];
                            ref[r * m + i] = s;
                            refmax = std::max(refmax, std::fabs(s));
                        }
                    }
                    graph G(be, W, k, n, planes);
                    ggml_backend_tensor_set(G.x, x.data(), 0, x.size() * sizeof(float));
                    for (int nth : {1, 2}) {
                        ggml_backend_cpu_set_n_threads(be, nth);
                        std::vector<float> y(m * rows, NAN);
                        ggml_backend_tensor_set(G.out[0], y.data(), 0, y.size() * sizeof(float));
                        ggml_backend_graph_compute(be, G.gf);
                        ggml_backend_tensor_get(G.out[0], y.data(), 0, y.size() * sizeof(float));
                        double err = 0.0;
                        for (size_t i = 0; i < y.size(); ++i) {
                            const double e = std::fabs((double) y[i] - ref[i]);
                            err = std::isnan(e) ? INFINITY : std::max(err, e);
                        }
                        const double rel = err / refmax;
                        worst = std::max(worst, rel);
                        printf("%6lld %6lld %2lld %6lld %7d %12.3e\n", (long long) k, (long long) m, (long long) n,
                               (long long) planes, nth, rel);
                        fwrite(y.data(), sizeof(float), y.size(), f);
                    }
                }
            }
        }
    }
    fclose(f);
    ggml_backend_free(be);
    printf("worst err/max|ref| %.3e\n", worst);
    return worst < 1e-5 ? 0 : 1;
}

// same case order as check()
static int cmp(const char * pa, const char * pb) {
    FILE * fa = fopen(pa, "rb");
    FILE * fb = fopen(pb, "rb");
    if (!fa || !fb) { fprintf(stderr, "cannot open inputs\n"); return 1; }
    double worst = 0.0;
    for (int64_t k : {768, 800, 2304, 4096}) {
        for (int64_t m : {8, 72, 1000}) {
            for (int64_t planes : {1, 2}) {
                for (int64_t n = 1; n <= 8; ++n) {
                    for (int nth : {1, 2}) {
                        const size_t cnt = m * n * planes;
                        std::vector<float> a(cnt), b(cnt);
                        if (fread(a.data(), sizeof(float), cnt, fa) != cnt || fread(b.data(), sizeof(float), cnt, fb) != cnt) {
                            fprintf(stderr, "short file\n");
                            return 1;
                        }
                        double d = 0.0, bm = 0.0;
                        for (size_t i = 0; i < cnt; ++i) {
                            const double e = std::fabs((double) a[i] - b[i]);
                            d = std::isnan(e) ? INFINITY : std::max(d, e);
                            bm = std::max(bm, (double) std::fabs(b[i]));
                        }
                        const double rel = d / bm;
                        worst = std::max(worst, rel);
                        printf("k %5lld m %5lld n %lld planes %lld threads %d  max|a-b|/max|b| %.3e%s\n", (long long) k,
                               (long long) m, (long long) n, (long long) planes, nth, rel, d == 0.0 ? " (identical)" : "");
                    }
                }
            }
        }
    }
    printf("worst max|a-b|/max|b| %.3e\n", worst);
    return 0;
}

static int bench(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "bench K M [THREADS] [NMAT] [REPS] [NMAX]\n"); return 1; }
    const int64_t k = atoll(argv[2]), m = atoll(argv[3]);
    const int nth   = argc > 4 ? atoi(argv[4]) : 1;
    const int nmat  = argc > 5 ? atoi(argv[5]) : 1;
    const int reps  = argc > 6 ? atoi(argv[6]) : 31;
    const int nmax  = argc > 7 ? atoi(argv[7]) : 8;
    std::mt19937 rng(42);
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, nth);
    weights W(k, m, nmat, rng);
    std::vector<graph *> G;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int n = 1; n <= nmax; ++n) {
        G.push_back(new graph(be, W, k, n, 1));
        std::vector<float> x(k * n);
        for (auto & v : x) v = u(rng);
        ggml_backend_tensor_set(G.back()->x, x.data(), 0, x.size() * sizeof(float));
        ggml_backend_graph_compute(be, G.back()->gf);  // warm-up
    }
    std::vector<double> best(nmax, 1e30);
    for (int r = 0; r < reps; ++r) {
        for (int n = 1; n <= nmax; ++n) {
            const double t0 = now_ms();
            ggml_backend_graph_compute(be, G[n - 1]->gf);
            best[n - 1] = std::min(best[n - 1], now_ms() - t0);
        }
    }
    printf("q4_0 repack k=%lld m=%lld nmat=%d threads=%d reps=%d (%.1f MB of weights)\n", (long long) k, (long long) m,
           nmat, nth, reps, nmat * ggml_row_size(GGML_TYPE_Q4_0, k) * m / 1e6);
    for (int n = 1; n <= nmax; ++n) {
        printf("  n=%d  %8.3f ms  %5.2fx\n", n, best[n - 1], best[n - 1] / best[0]);
    }
    for (graph * g : G) delete g;
    ggml_backend_free(be);
    return 0;
}

int main(int argc, char ** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "check" && argc > 2) return check(argv[2]);
    if (mode == "cmp" && argc > 3) return cmp(argv[2], argv[3]);
    if (mode == "bench") return bench(argc, argv);
    fprintf(stderr, "usage: %s check OUT.bin | cmp A.bin B.bin | bench K M [THREADS] [NMAT] [REPS] [NMAX]\n", argv[0]);
    return 1;
}
