#!/usr/bin/env bash
# Build ASTRA-sim's analytical binaries (congestion-unaware and -aware) at the upstream commits
# this project is tested with, with the one source fix they need (patches/), into DEST/bin:
#
#   astra-sim/build.sh [DEST]          # default DEST: ./astra-sim-build
#   export ASTRA_SIM_HOME=DEST         # what `chakra-convert-fast simulate` looks for
#
# Needs git, cmake (>= 3.15), make, g++ (C++17), protoc and libprotobuf (Debian/Ubuntu:
# apt-get install git cmake build-essential protobuf-compiler libprotobuf-dev), and network
# access to github.com (each repository is fetched at its commit only, --depth 1).
# docs/getting-astra-sim.md says what each pin is and why the patch.
set -euo pipefail

ASTRA_SIM_COMMIT=518bd513ae110428cd62eb60efc0f3993fd53c70      # astra-sim/astra-sim "update ns3 submodule (#366)"
CHAKRA_COMMIT=f37c2bb50afa8b0e99b32ba9921662ab77502e85          # astra-sim/chakra, tip of branch feederv3 (ETFeederV3)
ANALYTICAL_COMMIT=599a0473a9a74f5383f73b3cea5a12b9bc5ebaef      # astra-sim/astra-network-analytical
REMOTE_MEMORY_COMMIT=641cce854d256bfd288b1de9607b6757313363f9   # astra-sim/astra-memory-analytical
SPDLOG_COMMIT=62302019babd8fdf63c1c6dc4c9faa48d441a7f0          # gabime/spdlog
FMT_COMMIT=7e73566ce7bd3617cd4b14a2e3a19a2a30b524c7             # fmtlib/fmt
# yaml-cpp a83cd31 is fetched by ASTRA-sim's own CMakeLists.txt (FetchContent), pinned there.

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEST=$(mkdir -p "${1:-astra-sim-build}" && cd "${1:-astra-sim-build}" && pwd)
SRC="$DEST/src"

for tool in git cmake make g++ protoc; do
  command -v "$tool" > /dev/null || { echo "astra-sim/build.sh: $tool is not installed" >&2; exit 1; }
done

# fetch REPOSITORY COMMIT DIR: the repository's tree at COMMIT in DIR (a git checkout of one commit).
fetch() {
  local repository=$1 commit=$2 dir=$3
  mkdir -p "$dir"
  git -C "$dir" init -q
  git -C "$dir" remote remove origin 2> /dev/null || true
  git -C "$dir" remote add origin "https://github.com/$repository.git"
  git -C "$dir" fetch -q --depth 1 origin "$commit"
  git -C "$dir" checkout -q --detach FETCH_HEAD
  test "$(git -C "$dir" rev-parse HEAD)" = "$commit"
}

echo "fetching ASTRA-sim and its parts at their pinned commits into $SRC"
fetch astra-sim/astra-sim "$ASTRA_SIM_COMMIT" "$SRC"
fetch astra-sim/chakra "$CHAKRA_COMMIT" "$SRC/extern/graph_frontend/chakra"
fetch astra-sim/astra-network-analytical "$ANALYTICAL_COMMIT" "$SRC/extern/network_backend/analytical"
fetch astra-sim/astra-memory-analytical "$REMOTE_MEMORY_COMMIT" "$SRC/extern/remote_memory_backend/analytical"
fetch gabime/spdlog "$SPDLOG_COMMIT" "$SRC/extern/helper/spdlog"
fetch fmtlib/fmt "$FMT_COMMIT" "$SRC/extern/helper/fmt"

# astra-sim names Chakra::ETFeeder; the feederv3 branch declares it inside Chakra::FeederV3.
for patch in "$HERE"/patches/chakra-*.patch; do
  git -C "$SRC/extern/graph_frontend/chakra" apply --check "$patch"
  git -C "$SRC/extern/graph_frontend/chakra" apply "$patch"
done

echo "building (this takes several minutes)"
bash "$SRC/build/astra_analytical/build.sh" -t all

mkdir -p "$DEST/bin"
for binary in AstraSim_Analytical_Congestion_Unaware AstraSim_Analytical_Congestion_Aware; do
  cp "$SRC/build/astra_analytical/build/bin/$binary" "$DEST/bin/$binary"
done
echo "built $DEST/bin; now: export ASTRA_SIM_HOME=$DEST"
