// Command scaling draws the scaling report of scripts/scaling.sh: the
// cost of receiving an offer against the depth of its chain (cold, with
// the signatures verified on one core or across cores, and warm, the
// prefix found in a ChainCache), beside the floor of one bare P-256
// verification; and the latency and CPU cost of an offer against the rate
// offered. It reads `go test -bench` output (BenchmarkECDSAVerifyP256 and
// BenchmarkChainDepth, run at GOMAXPROCS 1 and 2) and TestScalingRate's JSON lines,
// writes an SVG, and prints a Markdown table.
//
//	go run ./scripts/scaling -bench bench.txt -rate rate.jsonl -svg docs/scaling.svg
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

type rate struct {
	Offered  int     `json:"offered"`
	Achieved float64 `json:"achieved"`
	P50      float64 `json:"p50_us"`
	P99      float64 `json:"p99_us"`
	CPU      float64 `json:"cpu_us_op"`
	Depth    int     `json:"depth"`
	Warm     bool    `json:"warm_cache"`
}

// benchLine: BenchmarkChainDepth/cold/depth=04-2   123   45678 ns/op ...
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-(\d+))?\s+\d+\s+([\d.]+) ns/op`)

func main() {
	benchFile := flag.String("bench", "", "go test -bench output")
	rateFile := flag.String("rate", "", "TestScalingRate's JSON lines")
	svgFile := flag.String("svg", "", "the SVG to write")
	flag.Parse()
	if *benchFile == "" || *rateFile == "" || *svgFile == "" {
		fmt.Fprintln(os.Stderr, "usage: scaling -bench FILE -rate FILE -svg FILE")
		os.Exit(2)
	}
	if err := run(*benchFile, *rateFile, *svgFile); err != nil {
		fmt.Fprintln(os.Stderr, "scaling:", err)
		os.Exit(1)
	}
}

// series: name -> depth -> ns/op (the median of the runs read).
type series map[string]map[int][]float64

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func run(benchFile, rateFile, svgFile string) error {
	f, err := os.Open(benchFile)
	if err != nil {
		return err
	}
	defer f.Close()
	ser := series{}
	add := func(name string, depth int, ns float64) {
		if ser[name] == nil {
			ser[name] = map[int][]float64{}
		}
		ser[name][depth] = append(ser[name][depth], ns)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		cpu := 1
		if m[2] != "" {
			cpu, _ = strconv.Atoi(m[2])
		}
		ns, _ := strconv.ParseFloat(m[3], 64)
		switch {
		case m[1] == "ECDSAVerifyP256":
			add(fmt.Sprintf("floor/cpu=%d", cpu), 0, ns)
		case strings.HasPrefix(m[1], "ChainDepth/"):
			parts := strings.Split(m[1], "/") // ChainDepth, cold|warm, depth=NN
			d, err := strconv.Atoi(strings.TrimPrefix(parts[2], "depth="))
			if err != nil {
				continue
			}
			add(fmt.Sprintf("%s/cpu=%d", parts[1], cpu), d, ns)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	floor := median(ser["floor/cpu=1"][0])
	if math.IsNaN(floor) {
		return fmt.Errorf("%s has no BenchmarkECDSAVerifyP256 at -cpu 1", benchFile)
	}
	var rates []rate
	rb, err := os.ReadFile(rateFile)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(rb)), "\n") {
		var r rate
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("%s: %v", rateFile, err)
		}
		rates = append(rates, r)
	}

	// The table.
	fmt.Printf("Floor (one bare P-256 verification, 1 core): %.1f us.\n\n", floor/1e3)
	fmt.Println("| depth | cold, 1 core (us) | cold, 2 cores (us) | warm (us) | warm / floor | cold 1 core / ((depth+1) x floor) |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: |")
	for d := 1; d <= 16; d++ {
		c1, c2, w := median(ser["cold/cpu=1"][d]), median(ser["cold/cpu=2"][d]), median(ser["warm/cpu=1"][d])
		fmt.Printf("| %d | %.0f | %.0f | %.0f | %.2f | %.2f |\n", d, c1/1e3, c2/1e3, w/1e3, w/floor, c1/(float64(d+1)*floor))
	}
	fmt.Println()
	fmt.Println("| offered / s | cache | achieved / s | p50 (us) | p99 (us) | CPU per offer (us) |")
	fmt.Println("| ---: | --- | ---: | ---: | ---: | ---: |")
	for _, r := range rates {
		c := "cold"
		if r.Warm {
			c = "warm"
		}
		fmt.Printf("| %d | %s | %.0f | %.0f | %.0f | %.0f |\n", r.Offered, c, r.Achieved, r.P50, r.P99, r.CPU)
	}

	// The picture: two panels side by side.
	var b strings.Builder
	const W, H = 1000, 420
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	type line struct {
		name, color, dash string
		pts               [][2]float64
	}
	// Panel 1: cost (us) against depth.
	var l1 []line
	for _, s := range []struct{ key, name, color, dash string }{
		{"cold/cpu=1", "cold, 1 core", "#c0392b", ""},
		{"cold/cpu=2", "cold, 2 cores (parallel)", "#e67e22", ""},
		{"warm/cpu=1", "warm (prefix cached)", "#2471a3", ""},
	} {
		ln := line{name: s.name, color: s.color, dash: s.dash}
		for d := 1; d <= 16; d++ {
			if v := median(ser[s.key][d]); !math.IsNaN(v) {
				ln.pts = append(ln.pts, [2]float64{float64(d), v / 1e3})
			}
		}
		l1 = append(l1, ln)
	}
	fl := line{name: "floor: one P-256 verify", color: "#555", dash: "6,4"}
	fl17 := line{name: "(depth+1) floors", color: "#999", dash: "2,3"}
	for d := 1; d <= 16; d++ {
		fl.pts = append(fl.pts, [2]float64{float64(d), floor / 1e3})
		fl17.pts = append(fl17.pts, [2]float64{float64(d), float64(d+1) * floor / 1e3})
	}
	l1 = append(l1, fl, fl17)
	// Panel 2: p50 latency (us) against the offered rate, log x.
	var l2 []line
	for _, warm := range []bool{true, false} {
		name, color := "p50, cold", "#c0392b"
		if warm {
			name, color = "p50, warm", "#2471a3"
		}
		ln := line{name: name, color: color}
		cpu := line{name: strings.Replace(name, "p50", "CPU per offer", 1), color: color, dash: "6,4"}
		for _, r := range rates {
			if r.Warm == warm {
				ln.pts = append(ln.pts, [2]float64{math.Log2(float64(r.Offered)), r.P50})
				cpu.pts = append(cpu.pts, [2]float64{math.Log2(float64(r.Offered)), r.CPU})
			}
		}
		l2 = append(l2, ln, cpu)
	}
	panel := func(x0, y0, w, h float64, title, xlabel, ylabel string, lines []line, xtick func(float64) string, xs []float64) {
		maxY := 0.0
		minX, maxX := math.Inf(1), math.Inf(-1)
		for _, ln := range lines {
			for _, p := range ln.pts {
				maxY = math.Max(maxY, p[1])
				minX, maxX = math.Min(minX, p[0]), math.Max(maxX, p[0])
			}
		}
		if maxY == 0 || minX >= maxX {
			return
		}
		maxY *= 1.08
		px := func(x float64) float64 { return x0 + (x-minX)/(maxX-minX)*w }
		py := func(y float64) float64 { return y0 + h - y/maxY*h }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="14" font-weight="bold">%s</text>`+"\n", x0, y0-14, title)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0, y0+h, x0+w, y0+h)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0, y0, x0, y0+h)
		for i := 0; i <= 4; i++ {
			v := maxY / 1.08 * float64(i) / 4
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`, x0, py(v), x0+w, py(v))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", x0-4, py(v)+4, v)
		}
		for _, x := range xs {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), y0+h+16, xtick(x))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x0+w/2, y0+h+34, xlabel)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n", x0-44, y0+h/2, x0-44, y0+h/2, ylabel)
		for i, ln := range lines {
			var pts []string
			for _, p := range ln.pts {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
			}
			dash := ""
			if ln.dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, ln.dash)
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", ln.color, dash, strings.Join(pts, " "))
			ly := y0 + 8 + float64(i)*16
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`, x0+12, ly, x0+36, ly, ln.color, dash)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x0+42, ly+4, ln.name)
		}
	}
	var depths []float64
	for d := 1; d <= 16; d++ {
		if d == 1 || d%3 == 1 || d == 16 {
			depths = append(depths, float64(d))
		}
	}
	panel(70, 50, 380, 300, "Cost of one receive against chain depth", "chain depth (elements before the offer)", "microseconds", l1,
		func(x float64) string { return strconv.Itoa(int(x)) }, depths)
	var xs []float64
	for _, r := range rates {
		if r.Warm {
			xs = append(xs, math.Log2(float64(r.Offered)))
		}
	}
	panel(590, 50, 380, 300, fmt.Sprintf("Chain of %d: latency and CPU against offered rate", rates[0].Depth), "offers a second (8 receivers, one shared cache)", "microseconds", l2,
		func(x float64) string { return strconv.Itoa(int(math.Round(math.Exp2(x)))) }, xs)
	b.WriteString("</svg>\n")
	return os.WriteFile(svgFile, []byte(b.String()), 0o644)
}
