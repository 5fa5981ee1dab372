#pragma once

namespace capsule {
inline constexpr char kVersion[] = "0.1.0";
}  // namespace capsule
