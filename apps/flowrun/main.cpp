#include "flowrun/cli.h"

int main(int argc, char** argv) { return flowrun::run_cli(argc, argv); }
