// Quantized rows against FBGEMM's own: test/fixtures/fbgemm_quant/rows.txt holds f32 rows and the
// bytes TorchRec's QuantEmbeddingBagCollection (torchrec 1.0.0 over fbgemm-gpu-cpu 1.0.0) stores
// for them (bench/baselines/fbgemm_quant_oracle.py); shardrec's quantize_rows must write the same
// bytes: the fp16 scale and bias in front, the packed codes, the padding to 16 bytes.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "kernels/quant_embedding_bag.h"

using namespace shardrec;

TEST_CASE("quantize_rows writes FBGEMM's int8, int4 and int2 rows byte for byte",
          "[quant][torchrec]") {
    std::ifstream in(std::filesystem::path(__FILE__).parent_path().parent_path() / "fixtures" /
                     "fbgemm_quant" / "rows.txt");
    REQUIRE(in);
    int cases = 0;
    std::string word, type_name;
    int64_t dim = 0, rows = 0, row_bytes = 0;
    while (in >> word >> type_name >> dim >> rows >> row_bytes) {
        REQUIRE(word == "case");
        INFO(type_name << ", dim " << dim);
        const kernels::QuantType type = kernels::quant_type_from_name(type_name);
        REQUIRE(kernels::quant_row_bytes(type, dim) == row_bytes);
        Tensor input = Tensor::empty({rows, dim}, DType::kF32);
        std::vector<uint8_t> want(static_cast<size_t>(rows * row_bytes));
        for (int64_t r = 0; r < rows; ++r) {
            in >> word;
            REQUIRE(word == "in");
            for (int64_t d = 0; d < dim; ++d) {
                std::string hex;
                in >> hex;
                const auto bits = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
                std::memcpy(input.data<float>() + r * dim + d, &bits, 4);
            }
            in >> word;
            REQUIRE(word == "out");
            for (int64_t b = 0; b < row_bytes; ++b) {
                std::string hex;
                in >> hex;
                want[static_cast<size_t>(r * row_bytes + b)] =
                    static_cast<uint8_t>(std::stoul(hex, nullptr, 16));
            }
        }
        Tensor got = Tensor::empty({rows * row_bytes}, DType::kU8);
        kernels::quantize_rows(input, type, got, Stream::cpu());
        for (int64_t r = 0; r < rows; ++r) {
            INFO("row " << r);
            const uint8_t* g = got.data<uint8_t>() + r * row_bytes;
            CHECK(std::vector<uint8_t>(g, g + row_bytes) ==
                  std::vector<uint8_t>(want.begin() + r * row_bytes,
                                       want.begin() + (r + 1) * row_bytes));
        }
        ++cases;
    }
    CHECK(cases == 15);  // int8, int4, int2 x dims 4, 16, 20, 64, 128
}
