// Topology files: the shipped ones load and match the built-in defaults; strict reading.
#include <catch2/catch.hpp>
#include <filesystem>

#include "engine/core/error.h"
#include "engine/distributed/topology.h"

using namespace shardrec;
using Catch::Matchers::Contains;

namespace {

std::string topology_file(const std::string& name) {
    // This file is test/distributed/test_topology.cpp.
    const auto root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
    return (root / "configs" / "topologies" / name).string();
}

std::string errors_of(const std::string& text, int world_size) {
    try {
        parse_topology(text, world_size, "topo.yaml");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("Topology: shipped files load; the defaults are the H100 node and cpu_2rank",
          "[distributed]") {
    const Topology h100 = load_topology(topology_file("h100_8gpu_node.yaml"), 16);
    CHECK(h100.world_size == 16);
    CHECK(h100.num_nodes() == 2);
    CHECK(h100.placement().device_of(9) == "cuda:1");
    CHECK(h100.memory_limit_bytes() == static_cast<int64_t>(80.0 * 0.85 * 1073741824.0));
    CHECK(std::string(h100.memory_kind()) == "HBM");
    CHECK(topology_to_yaml(default_topology("cuda", 16)) == topology_to_yaml(h100));

    const Topology cpu = load_topology(topology_file("cpu_2rank.yaml"), 2);
    CHECK(cpu.compute_device == "cpu");
    CHECK(std::string(cpu.memory_kind()) == "DDR");
    CHECK(topology_to_yaml(default_topology("cpu", 2)) == topology_to_yaml(cpu));
    CHECK(resolve_topology("", "cuda:3", 8).compute_device == "cuda");
    CHECK(resolve_topology("", "cpu", 4).local_size == 2);

    const Topology h200 = load_topology(topology_file("h200_8gpu_node.yaml"), 8);
    CHECK(h200.memory_limit_bytes() > h100.memory_limit_bytes());
    CHECK(h200.device_memory_bw_gbps > h100.device_memory_bw_gbps);
}

TEST_CASE("Topology: a world smaller than a node is a partial node, else nodes are whole",
          "[distributed]") {
    CHECK(default_topology("cuda", 1).local_size == 1);
    CHECK(default_topology("cuda", 4).num_nodes() == 1);
    CHECK_THROWS_WITH(default_topology("cuda", 12),
                      Catch::Contains("8 ranks per node do not divide the world size 12 in the "
                                      "built-in cuda topology: give a topology whose local_size "
                                      "divides it (plan --topology FILE, or sharding.topology"));
    const std::string text = "compute_device: cuda\nlocal_size: 8\n";
    CHECK_THAT(errors_of(text, 12),
               Contains("topo.yaml:2:13: local_size: 8 ranks per node do not divide the world "
                        "size 12"));
    CHECK(parse_topology(text, 24, "t").num_nodes() == 3);
}

TEST_CASE("Topology: unknown keys and misplaced fields are errors with their line",
          "[distributed]") {
    const std::string typo = errors_of("compute_device: cuda\ndevice_memory_gb: 80\n", 8);
    CHECK_THAT(typo, Contains("topo.yaml:2:1: device_memory_gb: unknown key"));
    CHECK_THAT(typo, Contains("did you mean 'device_memory_gib'?"));
    CHECK_THAT(errors_of("compute_device: cpu\ndevice_memory_gib: 80\n", 2),
               Contains("device_memory_gib: only valid when compute_device is cuda"));
    CHECK_THAT(errors_of("reserved_fraction: 1.0\n", 2), Contains("must be >= 0, < 1"));
}
