// mtp_generate: the engine of csrc/ without Python. Loads a GGUF (target with its MTP head, or a target and a
// sidecar head), runs greedy generation once per draft length (0 = plain decoding) and prints, one JSON object a
// line: the CPU variant loaded (csrc/cpu_backend.hpp) with each shipped variant's score and the CPU's features,
// the prompt's token ids, then each run's token ids and acceptance (plain decoding's with each token's top-2
// log-probabilities). MTP_LLM_CPU_VARIANT forces a variant, as in the package. Built by CMake with
// -DMTP_LLM_GENERATE_CLI=ON (instead of the extension); scripts/check_aarch64.sh --generate runs it under qemu-aarch64.
//
// Usage: mtp_generate MODEL.gguf [--head HEAD.gguf] [--prompt TEXT] [--max-tokens N] [--n-draft 0,1,3]
//                     [--threads N]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "errors.hpp"
#include "model.hpp"
#include "options.hpp"
#include "runtime.hpp"
#include "session.hpp"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace {

std::string json_string(const std::string & s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += (char) c;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += (char) c;
        }
    }
    return out + "\"";
}

std::string json_ids(const std::vector<int32_t> & ids) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        out += (i ? "," : "") + std::to_string(ids[i]);
    }
    return out + "]";
}

// The CPU features the kernel reports (on Linux arm64: getauxval, named as /proc/cpuinfo names them), read here
// rather than from ggml, so that a checker can compare ggml's choice of variant with them.
std::vector<std::string> cpu_features() {
    std::vector<std::string> out;
#if defined(__aarch64__) && defined(__linux__)
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    const struct {
        const char * name;
        unsigned long word, bit;
    } caps[] = {{"asimdhp", hw, 1ul << 10}, {"asimddp", hw, 1ul << 20}, {"sve", hw, 1ul << 22},
                {"sve2", hw2, 1ul << 1},   {"i8mm", hw2, 1ul << 13},   {"sme", hw2, 1ul << 23}};
    for (const auto & c : caps) {
        if (c.word & c.bit) out.push_back(c.name);
    }
#endif
    return out;
}

[[noreturn]] void usage(const char * msg) {
    std::fprintf(stderr,
                 "mtp_generate: %s\nusage: mtp_generate MODEL.gguf [--head HEAD.gguf] [--prompt TEXT] "
                 "[--max-tokens N] [--n-draft 0,1,3] [--threads N]\n",
                 msg);
    std::exit(2);
}

}  // namespace

int main(int argc, char ** argv) {
    std::string model_path, head_path, prompt = "The capital of France is";
    int32_t max_tokens = 16, n_threads = 2;
    std::vector<int32_t> drafts = {0, 1, 3};
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
            return argv[++i];
        };
        if (arg == "--head") {
            head_path = value();
        } else if (arg == "--prompt") {
            prompt = value();
        } else if (arg == "--max-tokens") {
            max_tokens = std::atoi(value().c_str());
        } else if (arg == "--threads") {
            n_threads = std::atoi(value().c_str());
        } else if (arg == "--n-draft") {
            drafts.clear();
            const std::string list = value();
            for (size_t start = 0; start < list.size();) {
                size_t end = list.find(',', start);
                if (end == std::string::npos) end = list.size();
                drafts.push_back(std::atoi(list.substr(start, end - start).c_str()));
                start = end + 1;
            }
        } else if (!arg.empty() && arg[0] == '-') {
            usage(("unknown option " + arg).c_str());
        } else if (model_path.empty()) {
            model_path = arg;
        } else {
            usage("one model path only");
        }
    }
    if (model_path.empty()) usage("no model given");

    try {
        mtp::ensure_backend();
        const mtp::CpuBackendInfo & cpu = mtp::cpu_backend_info();
        std::string scores = "{";
        for (size_t i = 0; i < cpu.scores.size(); ++i) {
            scores += (i ? "," : "") + json_string(cpu.scores[i].first) + ":" + std::to_string(cpu.scores[i].second);
        }
        scores += "}";
        std::string features = "{";
        for (size_t i = 0; i < cpu.features.size(); ++i) {
            features += (i ? "," : "") + json_string(cpu.features[i].first) + ":" + json_string(cpu.features[i].second);
        }
        features += "}";
        std::string hwcaps = "[";
        for (const std::string & f : cpu_features()) {
            hwcaps += (hwcaps.size() > 1 ? "," : "") + json_string(f);
        }
        hwcaps += "]";
        std::printf("{\"cpu_variant\":%s,\"runtime_variants\":%s,\"scores\":%s,\"backend_features\":%s,"
                    "\"hwcaps\":%s}\n",
                    json_string(cpu.variant).c_str(), cpu.runtime_variants ? "true" : "false", scores.c_str(),
                    features.c_str(), hwcaps.c_str());
        std::fflush(stdout);

        auto target = std::make_shared<mtp::Model>(model_path, mtp::ModelOptions{});
        std::shared_ptr<mtp::Model> head;
        if (!head_path.empty()) {
            head = std::make_shared<mtp::Model>(head_path, mtp::ModelOptions{});
        }
        const std::vector<int32_t> prompt_ids = target->tokenize(prompt, true, true);
        std::printf("{\"prompt\":%s,\"prompt_ids\":%s}\n", json_string(prompt).c_str(), json_ids(prompt_ids).c_str());
        std::fflush(stdout);

        for (int32_t n_draft : drafts) {
            mtp::ContextOptions opts;
            opts.n_draft = n_draft;
            opts.n_ctx = 512;
            opts.n_threads = n_threads;
            opts.adaptive_threads = false;
            opts.cache_prompt = false;
            mtp::Session session(target, n_draft > 0 ? head : nullptr, opts);
            mtp::GenerateOptions g;
            g.max_tokens = max_tokens;
            g.sampling.temp = 0.0f;
            g.top_logprobs = n_draft == 0 ? 2 : 0;  // plain decoding's margins, for comparisons across machines
            const int64_t start = mtp::now_us();
            const int32_t slot = session.begin(prompt_ids, g);
            std::vector<int32_t> ids;
            std::string text, reason, top = "[";
            for (;;) {
                mtp::StepResult r = session.step(slot);
                for (const mtp::TokenOut & t : r.tokens) {
                    ids.push_back(t.id);
                    text += t.text;
                    if (t.logprobs) {
                        top += top.size() > 1 ? ",[" : "[";
                        for (size_t k = 0; k < t.logprobs->top.size(); ++k) {
                            char buf[64];
                            std::snprintf(buf, sizeof buf, "%s[%d,%.9g]", k ? "," : "", t.logprobs->top[k].first,
                                          t.logprobs->top[k].second);
                            top += buf;
                        }
                        top += "]";
                    }
                }
                if (r.finished) {
                    reason = r.finish_reason;
                    break;
                }
            }
            const mtp::Counters c = session.call_stats(slot);
            session.end(slot);
            top += "]";
            std::printf("{\"n_draft\":%d,\"driver\":%s,\"tokens\":%s,\"top_logprobs\":%s,\"text\":%s,"
                        "\"finish_reason\":%s,\"drafts_generated\":%llu,\"drafts_accepted\":%llu,\"seconds\":%.1f}\n",
                        n_draft, json_string(session.mtp_driver()).c_str(), json_ids(ids).c_str(), top.c_str(),
                        json_string(text).c_str(), json_string(reason).c_str(),
                        (unsigned long long) c.drafts_generated, (unsigned long long) c.drafts_accepted,
                        (mtp::now_us() - start) / 1e6);
            std::fflush(stdout);
        }
    } catch (const std::exception & e) {
        std::fprintf(stderr, "mtp_generate: %s\n", e.what());
        return 1;
    }
    return 0;
}
