#include "tools/trace_synth.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace kvtier::tools {
namespace {

constexpr uint64_t kBlockTokens = 512;

// Content labels name what a block holds; the trie turns label paths into prefix-chained
// hash ids (the same label after a different prefix is a different block).
class Builder {
 public:
  explicit Builder(uint64_t seed) : rng_(seed) {}

  std::mt19937_64& rng() { return rng_; }
  uint64_t NewLabel() { return next_label_++; }
  std::vector<uint64_t> NewLabels(size_t n) {
    std::vector<uint64_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(NewLabel());
    return out;
  }
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  double Exponential(double mean) {
    return std::exponential_distribution<double>(1.0 / mean)(rng_);
  }

  void Emit(double time_ms, const std::vector<uint64_t>& labels) {
    TraceRequest r;
    r.timestamp_ms = static_cast<uint64_t>(time_ms);
    r.input_length = labels.size() * kBlockTokens;
    r.output_length = static_cast<uint64_t>(Uniform(16, 512));
    uint64_t parent = 0;  // id + 1
    for (uint64_t label : labels) {
      auto [it, inserted] = trie_.try_emplace(std::make_pair(parent, label), trie_.size());
      r.hash_ids.push_back(it->second);
      parent = it->second + 1;
    }
    out_.push_back(std::move(r));
  }
  size_t emitted() const { return out_.size(); }

  Trace Finish() {
    std::stable_sort(out_.begin(), out_.end(), [](const TraceRequest& a, const TraceRequest& b) {
      return a.timestamp_ms < b.timestamp_ms;
    });
    Trace t;
    t.requests = std::move(out_);
    absl::flat_hash_set<uint64_t> seen;
    for (const TraceRequest& r : t.requests) {
      t.total_blocks += r.hash_ids.size();
      for (uint64_t id : r.hash_ids) seen.insert(id);
    }
    t.unique_blocks = seen.size();
    return t;
  }

 private:
  std::mt19937_64 rng_;
  uint64_t next_label_ = 0;
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, uint64_t> trie_;
  std::vector<TraceRequest> out_;
};

// Zipf(s) over n items: index 0 is the most popular.
class Zipf {
 public:
  Zipf(size_t n, double s) {
    std::vector<double> w;
    for (size_t i = 0; i < n; ++i) w.push_back(1.0 / std::pow(static_cast<double>(i + 1), s));
    dist_ = std::discrete_distribution<size_t>(w.begin(), w.end());
  }
  size_t operator()(std::mt19937_64& rng) { return dist_(rng); }

 private:
  std::discrete_distribution<size_t> dist_;
};

std::vector<std::vector<uint64_t>> Pool(Builder& b, size_t n, int lo, int hi) {
  std::vector<std::vector<uint64_t>> pool;
  for (size_t i = 0; i < n; ++i) pool.push_back(b.NewLabels(b.Uniform(lo, hi)));
  return pool;
}

void Append(std::vector<uint64_t>* to, const std::vector<uint64_t>& from) {
  to->insert(to->end(), from.begin(), from.end());
}

// Sessions (chat, agent): each is a history re-read at every step after a pause.
struct Session {
  std::vector<uint64_t> history;
  int steps_left = 0;
  int step = 0;
};

// Runs sessions until `requests` are emitted: open(s) fills a new session (its history
// and steps_left) and returns the time to the next arrival; turn(s, time) runs one step
// (emitting its request); pause() gives the time to a session's next step (drawn only
// when there is one).
template <typename Open, typename Turn, typename Pause>
void DriveSessions(Builder& b, size_t requests, Open open, Turn turn, Pause pause) {
  using Event = std::pair<double, size_t>;  // (time, session)
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  std::vector<Session> sessions;
  double next_arrival = 0;
  while (b.emitted() < requests) {
    if (events.empty() || next_arrival <= events.top().first) {
      sessions.emplace_back();
      events.push({next_arrival, sessions.size() - 1});
      next_arrival += open(sessions.back());
      continue;
    }
    const auto [time, id] = events.top();
    events.pop();
    Session& s = sessions[id];
    turn(s, time);
    if (--s.steps_left > 0) {
      events.push({time + pause(), id});
    } else {
      s.history.clear();
      s.history.shrink_to_fit();
    }
  }
}

// chat and agent (tools/trace_synth.h).
void RunSessions(Builder& b, size_t requests, double arrival_ms, double pause_ms,
                 const std::vector<std::vector<uint64_t>>& prompts, double prompt_zipf,
                 bool agent) {
  Zipf pick(prompts.size(), prompt_zipf);
  auto open = [&](Session& s) {
    s.history = prompts[pick(b.rng())];
    s.steps_left =
        agent ? b.Uniform(4, 24) : 1 + std::geometric_distribution<int>(1.0 / 6)(b.rng());
    return b.Exponential(arrival_ms);
  };
  auto turn = [&](Session& s, double time) {
    ++s.step;
    if (agent) {
      Append(&s.history, b.NewLabels(1));       // the action
      Append(&s.history, b.NewLabels(s.step));  // a growing tool output
    } else {
      Append(&s.history, b.NewLabels(b.Uniform(1, 4)));  // the user turn
    }
    b.Emit(time, s.history);
    if (!agent) Append(&s.history, b.NewLabels(b.Uniform(1, 3)));  // the reply
  };
  DriveSessions(b, requests, open, turn, [&] { return b.Exponential(pause_ms); });
}

// conversation (tools/trace_synth.h): sessions of one or a few turns, long first inputs,
// think times of minutes.
void RunConversations(Builder& b, size_t requests) {
  auto prompts = Pool(b, 30, 2, 6);
  Zipf pick(prompts.size(), 1.0);
  std::lognormal_distribution<double> input(std::log(14.0), 1.0);      // blocks
  std::lognormal_distribution<double> think(std::log(120000.0), 1.0);  // ms
  std::bernoulli_distribution coin(0.5), paste(0.2);
  auto input_blocks = [&] {
    return static_cast<size_t>(std::clamp(static_cast<int>(input(b.rng())), 1, 200));
  };
  auto open = [&](Session& s) {
    if (coin(b.rng())) s.history = prompts[pick(b.rng())];
    Append(&s.history, b.NewLabels(input_blocks()));
    s.steps_left = coin(b.rng()) ? 1 : 1 + std::geometric_distribution<int>(0.4)(b.rng());
    return b.Exponential(300);
  };
  auto turn = [&](Session& s, double time) {
    if (s.step++ > 0) {
      Append(&s.history, b.NewLabels(1));  // the reply and the next user message
      if (paste(b.rng())) Append(&s.history, b.NewLabels(input_blocks()));
    }
    b.Emit(time, s.history);
  };
  DriveSessions(b, requests, open, turn, [&] { return think(b.rng()); });
}

}  // namespace

const char* SynthFamilyName(SynthFamily family) {
  switch (family) {
    case SynthFamily::kChat: return "chat";
    case SynthFamily::kSystemPrompts: return "sysprompt";
    case SynthFamily::kRag: return "rag";
    case SynthFamily::kAgent: return "agent";
    case SynthFamily::kScan: return "scan";
    case SynthFamily::kConversation:
      return "conversation";
  }
  return "unknown";
}

std::vector<SynthFamily> AllSynthFamilies() {
  return {SynthFamily::kChat,  SynthFamily::kSystemPrompts, SynthFamily::kRag,
          SynthFamily::kAgent, SynthFamily::kScan,          SynthFamily::kConversation};
}

size_t SynthDefaultRequests(SynthFamily family) {
  return family == SynthFamily::kConversation ? 12031 : 4000;
}

absl::StatusOr<SynthFamily> ParseSynthFamily(std::string_view name) {
  for (SynthFamily f : AllSynthFamilies()) {
    if (name == SynthFamilyName(f)) return f;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown trace family '", Sv(name),
                   "' (want chat, sysprompt, rag, agent, scan, conversation)"));
}

absl::StatusOr<Trace> SynthesizeTrace(const SynthOptions& options) {
  if (options.requests == 0) return absl::InvalidArgumentError("requests: must be > 0");
  Builder b(options.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(options.family));
  const size_t n = options.requests;
  switch (options.family) {
    case SynthFamily::kChat:
      RunSessions(b, n, 1000, 120000, Pool(b, 4, 4, 8), 1.0, /*agent=*/false);
      break;
    case SynthFamily::kAgent:
      RunSessions(b, n, 1000, 20000, Pool(b, 2, 6, 6), 1.0, /*agent=*/true);
      break;
    case SynthFamily::kSystemPrompts: {
      auto prompts = Pool(b, 64, 8, 32);
      Zipf pick(prompts.size(), 1.0);
      for (size_t i = 0; i < n; ++i) {
        std::vector<uint64_t> labels = prompts[pick(b.rng())];
        Append(&labels, b.NewLabels(b.Uniform(2, 16)));
        b.Emit(static_cast<double>(i) * 500, labels);
      }
      break;
    }
    case SynthFamily::kRag: {
      const std::vector<uint64_t> instruction = b.NewLabels(2);
      auto docs = Pool(b, 3000, 8, 24);
      Zipf pick(docs.size(), 0.9);
      for (size_t i = 0; i < n; ++i) {
        std::vector<uint64_t> labels = instruction;
        const int k = b.Uniform(1, 3);
        for (int d = 0; d < k; ++d) Append(&labels, docs[pick(b.rng())]);
        Append(&labels, b.NewLabels(1));
        b.Emit(static_cast<double>(i) * 500, labels);
      }
      break;
    }
    case SynthFamily::kConversation:
      RunConversations(b, n);
      break;
    case SynthFamily::kScan: {
      auto hot = Pool(b, 300, 4, 8);
      Zipf pick(hot.size(), 0.8);
      std::bernoulli_distribution scan(0.3);
      for (size_t i = 0; i < n; ++i) {
        std::vector<uint64_t> labels =
            scan(b.rng()) ? b.NewLabels(b.Uniform(16, 48)) : hot[pick(b.rng())];
        b.Emit(static_cast<double>(i) * 500, labels);
      }
      break;
    }
  }
  return b.Finish();
}

std::string TraceToJsonl(const Trace& trace) {
  std::string out;
  for (const TraceRequest& r : trace.requests) {
    absl::StrAppend(&out, "{\"timestamp\": ", r.timestamp_ms, ", \"input_length\": ",
                    r.input_length, ", \"output_length\": ", r.output_length,
                    ", \"hash_ids\": [");
    for (size_t i = 0; i < r.hash_ids.size(); ++i) {
      absl::StrAppend(&out, i ? ", " : "", r.hash_ids[i]);
    }
    out += "]}\n";
  }
  return out;
}

}  // namespace kvtier::tools
