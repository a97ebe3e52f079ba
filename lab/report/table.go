package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// Table is rows of cells under a header: what an experiment saves as CSV
// and may print aligned.
type Table struct {
	Header []string
	Rows   [][]string
}

// NewTable returns an empty table with these column names.
func NewTable(header ...string) *Table { return &Table{Header: header} }

// Add appends a row.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// Addf appends a row formatted like a CSV line: format is one verb per
// cell, comma-separated ("%s,%d,%.1f"), each taking one of args.
func (t *Table) Addf(format string, args ...any) {
	verbs := strings.Split(format, ",")
	if len(verbs) != len(args) {
		panic(fmt.Sprintf("report: Addf(%q) with %d arguments", format, len(args)))
	}
	row := make([]string, len(verbs))
	for i, v := range verbs {
		row[i] = fmt.Sprintf(v, args[i])
	}
	t.Add(row...)
}

// WithHeader is the table under other column names, for printing it with
// shorter ones than its CSV has.
func (t *Table) WithHeader(header ...string) *Table { return &Table{Header: header, Rows: t.Rows} }

// Len is the number of rows.
func (t *Table) Len() int { return len(t.Rows) }

// WriteCSV writes the header and the rows as CSV.
func (t *Table) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(t.Header); err != nil {
		return err
	}
	if err := cw.WriteAll(t.Rows); err != nil {
		return err
	}
	return cw.Error()
}

// Save writes the table as CSV to path.
func (t *Table) Save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := t.WriteCSV(f); err != nil {
		f.Close()
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	return f.Close()
}

// Print writes the header and rows right-aligned in columns, then a blank
// line.
func (t *Table) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range append([][]string{t.Header}, t.Rows...) {
		for _, c := range r {
			fmt.Fprint(tw, c, "\t")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
}
