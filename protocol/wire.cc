#include "protocol/wire.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvtier::protocol {

GetStreamParser::GetStreamParser(DestinationFn destination)
    : destination_(std::move(destination)),
      framer_([this](std::string_view bytes)
                  -> absl::StatusOr<std::vector<std::span<uint8_t>>> {
        if (!header_.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
          return absl::InternalError("get stream: header does not parse");
        }
        std::vector<std::span<uint8_t>> dest(header_.blocks_size());
        for (int i = 0; i < header_.blocks_size(); ++i) {
          const auto& info = header_.blocks(i);
          if (!info.found() || info.size() == 0) continue;
          auto d = destination_(static_cast<size_t>(i), info);
          if (!d.ok()) return d.status();
          if (d->size() < info.size()) {
            return absl::InternalError(absl::StrCat("get stream: destination of block ", i,
                                                    " holds ", d->size(), " bytes, needs ",
                                                    info.size()));
          }
          dest[i] = d->subspan(0, info.size());
        }
        return dest;
      }) {}

}  // namespace kvtier::protocol
