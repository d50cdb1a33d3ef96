// The layer link checks (CMakeLists.txt, shardrec_layer): an empty program linked with every
// object of one layer's library and only the layers below it; the link is the check.
int main() {
    return 0;
}
