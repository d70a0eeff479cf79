module proxy-component.invalid/bench/goproxy

go 1.26
