#include <algorithm>
#include <chrono>
#include <cstdio>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>
using namespace dnnl;

template <class F>
double med(F f) {
    f();
    std::vector<double> v;
    for (int i = 0; i < 9; i++) {
        auto t = std::chrono::steady_clock::now();
        f();
        v.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    std::sort(v.begin(), v.end());
    return v[4];
}

int main() {
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    int shapes[][3] = {{256, 1024, 3456}, {256, 512, 3456}, {256, 3456, 512},
                       {256, 1024, 1024}, {256, 512, 1024}, {2048, 1024, 3456}};
    using dt = memory::data_type;
    using tag = memory::format_tag;
    for (auto& sh : shapes) {
        int M = sh[0], N = sh[1], K = sh[2];
        double fl = 2.0 * M * N * K;
        memory::desc a({M, K}, dt::bf16, tag::ab), c({M, N}, dt::f32, tag::ab);
        std::vector<uint16_t> A(M * K, 0x3f00), B(K * N, 0x3e80);
        std::vector<float> C(M * N);
        for (int mode = 0; mode < 3; mode++) {
            memory::desc b = mode == 0   ? memory::desc({K, N}, dt::bf16, tag::ba)
                             : mode == 1 ? memory::desc({K, N}, dt::bf16, tag::ab)
                                         : memory::desc({K, N}, dt::bf16, tag::any);
            matmul::primitive_desc pd(matmul::desc(a, b, c), eng);
            matmul mm(pd);
            memory am(a, eng, A.data()), cm(c, eng, C.data());
            memory bm(pd.weights_desc(), eng);
            if (mode < 2)
                bm = memory(b, eng, B.data());
            double t = med([&] {
                mm.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
                s.wait();
            });
            printf("M%d N%d K%d %s %.0f GF\n", M, N, K,
                   mode == 0   ? "ba(W^T plain)"
                   : mode == 1 ? "ab"
                               : "blocked",
                   fl / t / 1e9);
        }
    }
}
