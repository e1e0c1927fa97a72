// Synthetic Mooncake-format traces (tools/trace.h) for workload families with published
// shapes, so eviction policies can be judged on more than one trace. Every family is
// seeded and deterministic; ids are prefix-chained (an id always has the same parent) and
// each block stands for 512 tokens. Parameters (fixed per family, documented here):
//
//   chat     multi-turn conversations (ShareGPT / Mooncake conversation shape): a session
//            starts every ~1 s (exponential), opens with one of 4 shared system prompts
//            (4-8 blocks, Zipf 1.0), has a geometric number of turns (mean 6); each turn
//            re-reads the whole history plus 1-4 new user blocks, appends a 1-3 block reply,
//            and the next turn follows after an exponential think time (mean 120 s).
//   sysprompt single-turn requests over shared system prompts (64 prompts of 8-32 blocks,
//            Zipf 1.0), each with a unique 2-16 block user context.
//   rag      retrieval-augmented generation: a 2-block instruction, then 1-3 documents
//            from a pool of 3,000 (8-24 blocks each, Zipf 0.9 popularity; the first
//            document decides the shared prefix), then a unique 1-block question.
//   agent    agent loops (ReAct / tool use): a session starts every ~1 s with a 6-block
//            tool-spec prompt (one of 2), runs 4-24 steps; step k appends an action block
//            and a tool output of k blocks (growing), and re-reads the whole history after
//            an exponential pause (mean 20 s: model call plus tool).
//   scan     a hot set of 300 prompts (4-8 blocks, Zipf 0.8) mixed with one-pass scans:
//            30% of requests are unique 16-48 block documents never seen again (the classic
//            LRU killer).
//
// Thread-safe (no shared state).
#ifndef KVTIER_TOOLS_TRACE_SYNTH_H_
#define KVTIER_TOOLS_TRACE_SYNTH_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/trace.h"

namespace kvtier::tools {

enum class SynthFamily { kChat, kSystemPrompts, kRag, kAgent, kScan };
const char* SynthFamilyName(SynthFamily family);  // "chat", "sysprompt", "rag", ...
// INVALID_ARGUMENT naming the value and the known names.
absl::StatusOr<SynthFamily> ParseSynthFamily(std::string_view name);
std::vector<SynthFamily> AllSynthFamilies();

struct SynthOptions {
  SynthFamily family = SynthFamily::kChat;
  uint64_t seed = 1;
  size_t requests = 4000;  // > 0
};

// Returns the synthetic trace. INVALID_ARGUMENT for requests == 0. Deterministic: the
// same options give the same trace.
absl::StatusOr<Trace> SynthesizeTrace(const SynthOptions& options);

// Returns `trace` as Mooncake JSONL (one object per line; ParseTrace reads it back).
std::string TraceToJsonl(const Trace& trace);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_TRACE_SYNTH_H_
