// Encode / decode throughput of every codec on one default 2 MiB fp16 block
// (L32 H8 D128 T16), block index 1 (no sinks), single thread; also with a bf16 source
// (args: codec id, dtype id). Bytes processed are the source bytes (2 MiB per iteration)
// for every codec, so GB/s are comparable with the
// BM_Memcpy reference (copying the same 2 MiB). The "ratio" counter is source bytes /
// blob bytes. BM_*Synthetic run the same on block 1 of a SyntheticKv sequence (post-RoPE
// keys with outlier channels, values; tools/synthetic_kv.h) in the same layout, which is what the
// lossless codec's ratio is quoted on.
//
//   build/tests/bench/codec_bench --benchmark_min_time=0.2
//   build/tests/bench/codec_bench --benchmark_filter='Memcpy|/8/' --benchmark_min_time=0.5
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only   (lossless only)
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kv/codec.h"
#include "kv/half.h"
#include "tools/synthetic_kv.h"

namespace kvtier::kv {
namespace {

Layout MakeLayout(Dtype dtype) {
  Layout layout;
  layout.dtype = dtype;
  return layout;
}

const std::string& Block(Dtype dtype) {
  static std::string* blocks[3] = {};  // by Dtype value; benchmarks run on one thread
  std::string*& block = blocks[static_cast<int>(dtype)];
  if (block == nullptr) {
    const Layout layout = MakeLayout(dtype);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto* s = new std::string(layout.BytesPerBlock(), '\0');
    auto* p = reinterpret_cast<uint16_t*>(s->data());
    for (uint64_t i = 0; i < layout.ElementsPerBlock(); ++i) {
      float v = normal(rng);
      if (i % 7 == 3) v += 10.0f;
      p[i] = FloatToDtype(dtype, v);
    }
    block = s;
  }
  return *block;
}

// Block 1 of a synthetic sequence in the default layout (see the file comment).
const std::string& SyntheticBlock(Dtype dtype) {
  static std::string* blocks[3] = {};
  std::string*& block = blocks[static_cast<int>(dtype)];
  if (block == nullptr) {
    tools::SyntheticParams params;
    params.layout = MakeLayout(dtype);
    params.seq_len = 2 * params.layout.tokens_per_block;
    absl::StatusOr<tools::SyntheticKv> g = tools::SyntheticKv::Generate(params);
    block = new std::string(g.ok() ? g->RawBlock(1, dtype) : std::string());
  }
  return *block;
}

void BM_Memcpy(benchmark::State& state) {
  const std::string& src = Block(Dtype::kFp16);
  std::string dst(src.size(), '\0');
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(src.size()));
}
BENCHMARK(BM_Memcpy);

void RunEncode(benchmark::State& state, const std::string& raw) {
  const auto codec = static_cast<CodecId>(state.range(0));
  const auto dtype = static_cast<Dtype>(state.range(1));
  state.SetLabel(std::string(CodecName(codec)) + "/" + DtypeName(dtype));
  const Layout layout = MakeLayout(dtype);
  for (auto _ : state) {
    auto enc = Encode(codec, layout, 1, AsBytes(raw));
    if (!enc.ok()) {
      state.SkipWithError("encode failed");
      break;
    }
    benchmark::DoNotOptimize(enc->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(raw.size()));
}

void RunDecode(benchmark::State& state, const std::string& raw) {
  const auto codec = static_cast<CodecId>(state.range(0));
  const auto dtype = static_cast<Dtype>(state.range(1));
  state.SetLabel(std::string(CodecName(codec)) + "/" + DtypeName(dtype));
  const Layout layout = MakeLayout(dtype);
  auto enc = Encode(codec, layout, 1, AsBytes(raw));
  if (!enc.ok()) {
    state.SkipWithError("encode failed");
    return;
  }
  std::string out(raw.size(), '\0');
  for (auto _ : state) {
    absl::Status st =
        Decode(AsBytes(*enc), {reinterpret_cast<uint8_t*>(out.data()), out.size()});
    if (!st.ok()) {
      state.SkipWithError("decode failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(raw.size()));
  state.counters["ratio"] = static_cast<double>(raw.size()) / static_cast<double>(enc->size());
}

void BM_Encode(benchmark::State& state) {
  RunEncode(state, Block(static_cast<Dtype>(state.range(1))));
}
void BM_Decode(benchmark::State& state) {
  RunDecode(state, Block(static_cast<Dtype>(state.range(1))));
}
void BM_EncodeSynthetic(benchmark::State& state) {
  RunEncode(state, SyntheticBlock(static_cast<Dtype>(state.range(1))));
}
void BM_DecodeSynthetic(benchmark::State& state) {
  RunDecode(state, SyntheticBlock(static_cast<Dtype>(state.range(1))));
}

void AllCodecArgs(benchmark::internal::Benchmark* b) {
  for (Dtype dtype : {Dtype::kFp16, Dtype::kBf16}) {
    for (CodecId codec : AllCodecs()) {
      if (codec == CodecId::kBf16 && dtype != Dtype::kBf16) continue;
      if (codec == CodecId::kFp16 && dtype != Dtype::kFp16) continue;
      b->Args({static_cast<int>(codec), static_cast<int>(dtype)});
    }
  }
}
BENCHMARK(BM_Encode)->Apply(AllCodecArgs);
BENCHMARK(BM_Decode)->Apply(AllCodecArgs);
BENCHMARK(BM_EncodeSynthetic)->Apply(AllCodecArgs);
BENCHMARK(BM_DecodeSynthetic)->Apply(AllCodecArgs);

}  // namespace
}  // namespace kvtier::kv

BENCHMARK_MAIN();
