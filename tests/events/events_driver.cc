// events_driver: publishes a known, seeded sequence of block events through a real
// ZmqEventPublisher for an independent consumer (kv_events_consumer.py) to check.
//
//   events_driver map|array
// prints "PUB <endpoint>" and "REPLAY <endpoint>", then answers commands on stdin:
//   warmup     one AllBlocksCleared batch in namespace "warmup"; prints "ok <seq>"
//   script     the seeded workload, a Flush after every 1..4 events; prints
//              "done <first_seq> <last_seq>", then one "expect <model> <hex key> <MEDIA>"
//              line per resident block (MEDIA: sorted, comma-separated), then "end"
//   flood <n>  n one-event batches in namespace "flood"; prints "done <first> <last>"
//   quit       exits
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "events/zmq_publisher.h"

namespace kvtier::events {
namespace {

struct Namespace {
  std::string name;
  std::string model_id;  // empty: the topic uses the name
  std::string topic_model() const { return model_id.empty() ? name : model_id; }
};

// Runs the workload and returns the resident set it leaves: (model, key) -> media.
std::map<std::pair<std::string, std::string>, std::set<std::string>> RunScript(
    ZmqEventPublisher& pub) {
  const Namespace spaces[] = {{"ns-a", "model-a"}, {"ns-b", ""}};
  std::mt19937 rng(15);
  std::map<std::pair<std::string, std::string>, std::set<std::string>> resident;
  int in_batch = 0;
  int batch_len = 1;
  auto emit = [&](BlockEvent e) {
    pub.Publish(std::move(e));
    if (++in_batch >= batch_len) {
      pub.Flush();
      in_batch = 0;
      batch_len = 1 + static_cast<int>(rng() % 4);
    }
  };
  for (int op = 0; op < 200; ++op) {
    const Namespace& ns = spaces[rng() % 2];
    const uint32_t r = rng() % 100;
    // Chains of binary keys: "<ns>\x00<chain>\x01<block>".
    const int chain = static_cast<int>(rng() % 3);
    const int len = 1 + static_cast<int>(rng() % 4);
    auto key = [&](int block) {
      return absl::StrCat(ns.name, std::string(1, '\0'), chain, std::string(1, '\1'), block);
    };
    const Medium medium = rng() % 2 == 0 ? Medium::kCpuPinned : Medium::kDisk;
    if (r < 55) {  // a chain becomes resident in one tier
      std::vector<std::string> keys;
      for (int b = 0; b < len; ++b) keys.push_back(key(b));
      BlockEvent e = BlockEvent::Stored(ns.name, ns.model_id, keys, std::nullopt, 16, medium);
      for (int t = 0; t < 16 * len; ++t)
        e.token_ids.push_back(static_cast<uint32_t>(rng() % 32000));
      if (rng() % 4 == 0) e.lora_name = "adapter-1";
      for (const std::string& k : keys) resident[{ns.topic_model(), k}].insert(MediumName(medium));
      emit(std::move(e));
    } else if (r < 95) {  // the tail of a chain leaves one tier
      const int from = static_cast<int>(rng() % len);
      std::vector<std::string> keys;
      for (int b = from; b < len; ++b) {
        auto it = resident.find({ns.topic_model(), key(b)});
        if (it == resident.end() || !it->second.count(MediumName(medium))) continue;
        it->second.erase(MediumName(medium));
        if (it->second.empty()) resident.erase(it);
        keys.push_back(key(b));
      }
      if (!keys.empty()) emit(BlockEvent::Removed(ns.name, ns.model_id, keys, medium));
    } else {  // the namespace is flushed
      for (auto it = resident.begin(); it != resident.end();) {
        it = it->first.first == ns.topic_model() ? resident.erase(it) : std::next(it);
      }
      emit(BlockEvent::AllCleared(ns.name, ns.model_id));
    }
  }
  pub.Flush();
  return resident;
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: events_driver map|array\n";
    return 2;
  }
  absl::StatusOr<BatchFormat> format = ParseBatchFormat(argv[1]);
  if (!format.ok()) {
    std::cerr << format.status() << "\n";
    return 2;
  }
  EventsConfig config;
  config.endpoint = "tcp://127.0.0.1:*";
  config.replay_endpoint = "tcp://127.0.0.1:*";
  config.node_id = "node-py";
  config.format = *format;
  config.send_all_blocks_cleared = true;  // the consumer checks every event kind
  config.batch_ms = 10000;  // only Flush ends a batch: the script decides the boundaries
  config.replay_buffer_batches = 256;
  auto pub = ZmqEventPublisher::Create(config);
  if (!pub.ok()) {
    std::cerr << pub.status() << "\n";
    return 1;
  }
  std::cout << "PUB " << (*pub)->endpoint() << "\nREPLAY " << (*pub)->replay_endpoint()
            << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "warmup") {
      (*pub)->Publish(BlockEvent::AllCleared("warmup", ""));
      (*pub)->Flush();
      std::cout << "ok " << (*pub)->stats().next_seq - 1 << std::endl;
    } else if (cmd == "script") {
      const uint64_t first = (*pub)->stats().next_seq;
      auto resident = RunScript(**pub);
      std::cout << "done " << first << " " << (*pub)->stats().next_seq - 1 << "\n";
      for (const auto& [k, media] : resident) {
        std::cout << "expect " << k.first << " " << absl::BytesToHexString(k.second) << " "
                  << absl::StrJoin(media, ",") << "\n";
      }
      std::cout << "end" << std::endl;
    } else if (cmd == "flood") {
      int n = 0;
      in >> n;
      const uint64_t first = (*pub)->stats().next_seq;
      for (int i = 0; i < n; ++i) {
        (*pub)->Publish(BlockEvent::AllCleared("flood", ""));
        (*pub)->Flush();
      }
      std::cout << "done " << first << " " << (*pub)->stats().next_seq - 1 << std::endl;
    } else if (cmd == "quit") {
      break;
    } else {
      std::cerr << "unknown command '" << line << "'\n";
      return 2;
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvtier::events

int main(int argc, char** argv) { return kvtier::events::Main(argc, argv); }
