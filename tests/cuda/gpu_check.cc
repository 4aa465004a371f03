// The CUDA backend checked against the CPU path on one GGUF, and timed (docs/backends.md
// "Checking on a GPU"). Built with -DLARQL_CUDA=ON; run on a machine with an NVIDIA GPU:
//
//   larql_gpu_check MODEL.gguf [--quick] [--bench] [--positions N]
//
// Checks (exit 1 if one fails):
//   logits   N positions of one sequence, on the GPU by decode steps, and by a prefill of the
//            first half then decode steps, against the CPU's logits at every position: mean
//            KL(cpu || gpu) <= 0.01 nats and top-1 agreement >= 97% (issue 28's bound, the CPU's
//            own distance to llama.cpp).
//   greedy   10 prompts, 16 greedy tokens each: the GPU's tokens equal the CPU's.
//   batch    8 sequences decoded together (decode_batch) give bit-identical logits to each alone.
//   oom      sequences made until the device is full: an Error naming the bytes, and the device
//            still runs afterwards.
// --bench times decode (graph replay), a 2,048-token prefill and 16 batched sequences, and the
// device-to-device copy bandwidth the decode roofline is computed from.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_model.h"
#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "model/model.h"
#include "util/error.h"

using namespace larql;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int failures = 0;
void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// KL(p || q) of two logit rows, nats (softmax in double).
double kl(const float* a, const float* b, int64_t n) {
  double ma = -INFINITY, mb = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    ma = std::max(ma, static_cast<double>(a[i]));
    mb = std::max(mb, static_cast<double>(b[i]));
  }
  double za = 0, zb = 0;
  for (int64_t i = 0; i < n; ++i) {
    za += std::exp(a[i] - ma);
    zb += std::exp(b[i] - mb);
  }
  double k = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double la = a[i] - ma - std::log(za), lb = b[i] - mb - std::log(zb);
    k += std::exp(la) * (la - lb);
  }
  return std::max(0.0, k);
}

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(10, static_cast<int32_t>(std::min<int64_t>(vocab - 1, 200000)));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  t[0] = 2;  // <bos>
  return t;
}

struct CpuRef {
  std::shared_ptr<Forward> f;
  int64_t H, V;
  std::vector<float> logits_at(const std::vector<int32_t>& toks) {  // [n, V]
    KvCache cache(f->config());
    const int64_t n = static_cast<int64_t>(toks.size());
    std::vector<float> x(static_cast<size_t>(n * H)), out(static_cast<size_t>(n * V));
    f->forward(toks.data(), n, cache, x.data());
    for (int64_t t = 0; t < n; ++t) f->logits(x.data() + t * H, 1, out.data() + t * V);
    return out;
  }
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int steps) {
    KvCache cache(f->config());
    std::vector<float> x(prompt.size() * static_cast<size_t>(H)), lg(static_cast<size_t>(V));
    f->forward(prompt.data(), static_cast<int64_t>(prompt.size()), cache, x.data());
    f->logits(x.data() + (prompt.size() - 1) * H, 1, lg.data());
    std::vector<int32_t> out;
    for (int s = 0; s < steps; ++s) {
      const int32_t t = static_cast<int32_t>(argmax(lg.data(), V));
      out.push_back(t);
      if (s + 1 == steps) break;
      f->forward(&t, 1, cache, x.data());
      f->logits(x.data(), 1, lg.data());
    }
    return out;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [--quick] [--bench] [--positions N]\n", argv[0]);
    return 2;
  }
  bool quick = false, bench = false;
  int64_t P = 600;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--bench") bench = true;
    else if (a == "--positions" && i + 1 < argc) P = std::stoll(argv[++i]);
  }
  if (quick) P = std::min<int64_t>(P, 40);
  try {
    const double t0 = now();
    auto model = std::shared_ptr<const Model>(Model::load(argv[1]));
    const ModelConfig& c = model->config();
    auto dev = cuda::open_model(model);
    const DeviceInfo info = dev->info();
    std::printf("model %s: %lld layers, hidden %lld, vocab %lld; %s; %.2f GiB on the device; loaded in %.1f s\n",
                argv[1], static_cast<long long>(c.n_layers), static_cast<long long>(c.hidden),
                static_cast<long long>(c.vocab), info.name.c_str(), info.weight_bytes / 1073741824.0, now() - t0);
    CpuRef cpu{std::make_shared<Forward>(model, 0), c.hidden, c.vocab};
    const int64_t V = c.vocab;

    // ---- logits over P positions: decode steps, and prefill + decode steps ----
    {
      const auto toks = random_tokens(P, V, 1);
      const double tc = now();
      const auto ref = cpu.logits_at(toks);
      std::printf("cpu reference: %lld positions in %.1f s\n", static_cast<long long>(P), now() - tc);
      std::vector<float> lg(static_cast<size_t>(V));
      for (int mode = 0; mode < 2; ++mode) {
        auto seq = dev->new_sequence(std::max<int64_t>(P, 1));
        const int64_t pre = mode == 0 ? 1 : P / 2;
        seq->append(toks.data(), pre);
        double kl_sum = 0, kl_max = 0;
        int64_t agree = 0, agree_ties = 0, n = 0;
        for (int64_t t = pre - 1; t < P; ++t) {
          if (t >= pre) seq->append(&toks[static_cast<size_t>(t)], 1);
          seq->logits(lg.data());
          const float* r = ref.data() + t * V;
          const double k = kl(r, lg.data(), V);
          kl_sum += k;
          kl_max = std::max(kl_max, k);
          const int64_t want = argmax(r, V), got = argmax(lg.data(), V);
          agree += want == got;
          // Random-weight stand-ins have near-flat distributions: a GPU pick whose CPU logit is
          // within 0.01 of the CPU's top is a tie, not a disagreement.
          agree_ties += want == got || r[want] - r[got] <= 0.01f;
          ++n;
          if (t == pre - 1 || t == P - 1) {
            const int32_t am = seq->argmax();
            if (am != argmax(lg.data(), V)) expect(false, "device argmax equals the argmax of the copied logits");
          }
        }
        const double mean = kl_sum / static_cast<double>(n), top1 = static_cast<double>(agree) / static_cast<double>(n),
                     top1_ties = static_cast<double>(agree_ties) / static_cast<double>(n);
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "logits (%s, %lld positions): mean KL %.2e nats (max %.2e), top-1 %.1f%% (%.1f%% counting ties "
                      "within 0.01 as agreement)",
                      mode == 0 ? "decode steps" : "prefill of half, then decode", static_cast<long long>(n), mean, kl_max,
                      100 * top1, 100 * top1_ties);
        expect(mean <= 0.01 && top1_ties >= 0.97, buf);
      }
    }

    // ---- greedy continuations ----
    {
      const std::vector<int64_t> lens = quick ? std::vector<int64_t>{5, 33} : std::vector<int64_t>{5, 17, 33, 64, 100, 128, 200, 256, 300, 400};
      const int steps = quick ? 4 : 16;
      int equal = 0;
      for (size_t i = 0; i < lens.size(); ++i) {
        const auto prompt = random_tokens(lens[i], V, static_cast<uint32_t>(100 + i));
        const auto want = cpu.greedy(prompt, steps);
        auto seq = dev->new_sequence(lens[i] + steps);
        seq->append(prompt.data(), static_cast<int64_t>(prompt.size()));
        std::vector<int32_t> got;
        for (int s = 0; s < steps; ++s) {
          const int32_t t = seq->argmax();
          got.push_back(t);
          if (s + 1 < steps) seq->append(&t, 1);
        }
        equal += got == want;
        if (got != want) {
          size_t k = 0;
          while (k < got.size() && got[k] == want[k]) ++k;
          std::printf("  prompt %zu (%lld tokens): first difference at step %zu\n", i, static_cast<long long>(lens[i]), k);
        }
      }
      expect(equal == static_cast<int>(lens.size()),
             "greedy: " + std::to_string(equal) + " of " + std::to_string(lens.size()) + " prompts give the CPU's " +
                 std::to_string(steps) + " tokens");
    }

    // ---- batch invariance ----
    {
      const int N = quick ? 4 : 8, steps = quick ? 2 : 4;
      std::vector<std::unique_ptr<DeviceSequence>> a, b;
      for (int i = 0; i < N; ++i) {
        const auto prompt = random_tokens(3 + 5 * i, V, static_cast<uint32_t>(500 + i));
        a.push_back(dev->new_sequence(256));
        b.push_back(dev->new_sequence(256));
        a.back()->append(prompt.data(), static_cast<int64_t>(prompt.size()));
        b.back()->append(prompt.data(), static_cast<int64_t>(prompt.size()));
      }
      bool same = true;
      std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
      for (int s = 0; s < steps; ++s) {
        std::vector<int32_t> tok(static_cast<size_t>(N)), am(static_cast<size_t>(N));
        std::vector<DeviceSequence*> ptrs;
        for (int i = 0; i < N; ++i) {
          tok[static_cast<size_t>(i)] = a[static_cast<size_t>(i)]->argmax();
          ptrs.push_back(a[static_cast<size_t>(i)].get());
        }
        dev->decode_batch(ptrs, tok.data(), am.data());
        for (int i = 0; i < N; ++i) {
          b[static_cast<size_t>(i)]->append(&tok[static_cast<size_t>(i)], 1);
          a[static_cast<size_t>(i)]->logits(la.data());
          b[static_cast<size_t>(i)]->logits(lb.data());
          same = same && std::memcmp(la.data(), lb.data(), la.size() * 4) == 0 &&
                 am[static_cast<size_t>(i)] == b[static_cast<size_t>(i)]->argmax();
        }
      }
      expect(same, "batch: " + std::to_string(N) + " sequences decoded together give each one's logits bit for bit");
    }

    // ---- out of memory ----
    if (!quick) {
      std::vector<std::unique_ptr<DeviceSequence>> hog;
      std::string msg;
      try {
        for (int i = 0; i < 100000; ++i) hog.push_back(dev->new_sequence(c.context_length));
      } catch (const Error& e) {
        msg = e.what();
      }
      const size_t held = hog.size();
      hog.clear();
      auto seq = dev->new_sequence(64);
      const auto prompt = random_tokens(8, V, 9);
      seq->append(prompt.data(), 8);
      expect(msg.find("out of device memory: asked for") != std::string::npos && seq->argmax() >= 0,
             "oom after " + std::to_string(held) + " sequences: \"" + msg.substr(0, 160) + "...\"; the device runs on");
    }

    // ---- timings ----
    if (bench) {
      // Device-to-device copy bandwidth (bytes read + written), the roofline's bound.
      const size_t bytes = size_t{2} << 30;
      void *s = nullptr, *d = nullptr;
      cudaMalloc(&s, bytes);
      cudaMalloc(&d, bytes);
      cudaMemset(s, 1, bytes);
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaMemcpy(d, s, bytes, cudaMemcpyDeviceToDevice);
      std::vector<float> ms;
      for (int i = 0; i < 10; ++i) {
        cudaEventRecord(e0);
        cudaMemcpy(d, s, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float m = 0;
        cudaEventElapsedTime(&m, e0, e1);
        ms.push_back(m);
      }
      std::sort(ms.begin(), ms.end());
      const double bw = 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3);
      cudaFree(s);
      cudaFree(d);

      const auto prompt = random_tokens(16, V, 77);
      auto seq = dev->new_sequence(4096);
      seq->append(prompt.data(), 16);
      for (int i = 0; i < 8; ++i) {
        const int32_t t = seq->argmax();
        seq->append(&t, 1);
      }
      const int steps = 128;
      const double td = now();
      for (int i = 0; i < steps; ++i) {
        const int32_t t = seq->argmax();
        seq->append(&t, 1);
      }
      const double decode_tps = steps / (now() - td);
      // Bytes a decode token reads: every weight but the embedding table (one row of it),
      // plus the lm_head (the tied table) once; K/V of ~150 positions is negligible here.
      const double wbytes = static_cast<double>(info.weight_bytes);
      const double roof = bw / wbytes;

      const auto long_prompt = random_tokens(2048, V, 78);
      auto pseq = dev->new_sequence(2048);
      pseq->append(long_prompt.data(), 512);  // warm-up
      pseq->truncate(0);
      std::vector<double> pt;
      for (int i = 0; i < 3; ++i) {
        pseq->truncate(0);
        const double tp = now();
        pseq->append(long_prompt.data(), 2048);
        pseq->argmax();
        pt.push_back(now() - tp);
      }
      std::sort(pt.begin(), pt.end());
      const double prefill_tps = 2048 / pt[1];

      const int NB = 16, bsteps = 64;
      std::vector<std::unique_ptr<DeviceSequence>> bs;
      std::vector<DeviceSequence*> ptrs;
      std::vector<int32_t> tok(NB), am(NB);
      for (int i = 0; i < NB; ++i) {
        bs.push_back(dev->new_sequence(4096));
        const auto p = random_tokens(16, V, static_cast<uint32_t>(900 + i));
        bs.back()->append(p.data(), 16);
        ptrs.push_back(bs.back().get());
        tok[static_cast<size_t>(i)] = bs.back()->argmax();
      }
      dev->decode_batch(ptrs, tok.data(), am.data());
      const double tb = now();
      for (int s2 = 0; s2 < bsteps; ++s2) {
        tok = am;
        dev->decode_batch(ptrs, tok.data(), am.data());
      }
      const double batch_tps = NB * bsteps / (now() - tb);
      std::printf("\nbench on %s\n", info.name.c_str());
      std::printf("  copy bandwidth (read+write)   %8.0f GB/s\n", bw / 1e9);
      std::printf("  weights read per token       %8.3f GB -> roofline %.0f tok/s\n", wbytes / 1e9, roof);
      std::printf("  decode (graph, greedy)        %8.1f tok/s  = %.0f%% of the roofline\n", decode_tps,
                  100 * decode_tps / roof);
      std::printf("  prefill 2048 tokens           %8.0f tok/s  (%.1f ms)\n", prefill_tps, pt[1] * 1e3);
      std::printf("  16 sequences batched          %8.1f tok/s aggregate = %.1fx one stream\n", batch_tps,
                  batch_tps / decode_tps);
      std::printf("BENCH_JSON {\"device\": \"%s\", \"copy_gbps\": %.1f, \"weight_gb\": %.4f, \"decode_tps\": %.2f, "
                  "\"roofline_tps\": %.1f, \"prefill2048_tps\": %.1f, \"batch16_tps\": %.1f}\n",
                  info.name.c_str(), bw / 1e9, wbytes / 1e9, decode_tps, roof, prefill_tps, batch_tps);
    }
  } catch (const std::exception& e) {
    std::printf("FAIL error: %s\n", e.what());
    return 1;
  }
  std::printf("%s: %d failure%s\n", failures == 0 ? "ok" : "FAILED", failures, failures == 1 ? "" : "s");
  return failures == 0 ? 0 : 1;
}
