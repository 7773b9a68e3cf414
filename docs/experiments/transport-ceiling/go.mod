module coordkit.dev/experiments/transportceiling

go 1.26
