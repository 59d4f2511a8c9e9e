// The KV-cache page's calculator: the formulas of llm_models.kv_bytes (kv_bytes_per_token, tokens_that_fit) and
// kv_cache.memory (whole_cache_bytes), in the same order of operations, so the browser and the Python table give identical numbers
// (tests/test_browser.py checks), and the same refusals: a batch, a context, layers, heads and a head width are
// whole numbers of at least 1. Each field also has a ceiling (LIMITS) far beyond any model or machine there is, so
// an input like 1e300 is refused in one line instead of filling the page with a 300-digit result.
// Plain script, no dependencies; it does nothing on a page without a [data-calculator] element.
(function () {
  "use strict";
  var GIB = Math.pow(2, 30);
  // The largest value each field takes: a hundred times the largest published model's (126 layers, 128 KV heads,
  // head widths of 256, about 2 x 10^12 parameters), contexts of 10^9 tokens, batches of 10^6 sequences, 10^6 GiB
  // of memory: far beyond any real case, and every result still a number a line can hold.
  var LIMITS = {layers: 12800, kv_heads: 12800, head_dim: 25600, batch: 1e6, context: 1e9, parameters: 2e14,
                memory: 1e6};

  function bytesPerToken(layers, kvHeads, headDim, bits) {
    return 2 * layers * kvHeads * headDim * bits / 8;
  }

  function wholeCacheBytes(perToken, batch, tokens) {
    return perToken * batch * tokens;
  }

  function tokensThatFit(memoryBytes, weightBytes, perToken) {
    return Math.max(0, Math.floor((memoryBytes - weightBytes) / perToken));
  }

  function exact(value) {
    return value.toLocaleString("en-US", { maximumFractionDigits: 1 });
  }

  function binary(value) {
    var units = [[Math.pow(2, 60), "EiB"], [Math.pow(2, 50), "PiB"], [Math.pow(2, 40), "TiB"], [GIB, "GiB"],
                 [Math.pow(2, 20), "MiB"], [1024, "KiB"]];
    for (var i = 0; i < units.length; i++) {
      if (value >= units[i][0]) {
        var scaled = value / units[i][0];
        return (scaled < 100 ? scaled.toPrecision(3) : Math.round(scaled).toLocaleString("en-US")) + " " + units[i][1];
      }
    }
    return exact(value) + " bytes";
  }

  function setup(root) {
    var data = JSON.parse(root.querySelector(".lab-calculator-data").textContent);
    var form = root.querySelector("form");
    var field = function (name) { return form.elements[name]; };
    var out = function (name) { return root.querySelector('[data-out="' + name + '"]'); };

    function pick() {
      var chosen = data.models.filter(function (m) { return m.name === field("model").value; })[0];
      if (chosen) {
        ["layers", "kv_heads", "head_dim", "parameters"].forEach(function (k) { field(k).value = chosen[k]; });
      }
      update();
    }

    function number(name) {
      var value = Number(field(name).value);
      return field(name).value !== "" && isFinite(value) ? value : NaN;
    }

    function show(name, value, text) {
      out(name).textContent = text;
      out(name).setAttribute("data-value", String(value));
    }

    // The first field that is not what the formula needs, in one line naming it; "" when every field is.
    function refusal() {
      var whole = [["layers", "layers"], ["kv_heads", "KV heads"], ["head_dim", "head dim"],
                   ["batch", "batch (sequences)"], ["context", "context (tokens per sequence)"]];
      for (var i = 0; i < whole.length; i++) {
        var value = number(whole[i][0]);
        if (!(Number.isInteger(value) && value >= 1 && value <= LIMITS[whole[i][0]])) {
          return whole[i][1] + " must be a whole number from 1 to " + exact(LIMITS[whole[i][0]]) + ", got "
            + (field(whole[i][0]).value || "nothing");
        }
      }
      var params = number("parameters");
      if (!(Number.isInteger(params) && params >= 0 && params <= LIMITS.parameters)) {
        return "parameters must be a whole number from 0 to " + exact(LIMITS.parameters) + ", got "
          + (field("parameters").value || "nothing");
      }
      var memory = number("memory");
      if (!(memory >= 0 && memory <= LIMITS.memory)) {
        return "memory must be a number of GiB from 0 to " + exact(LIMITS.memory) + ", got "
          + (field("memory").value || "nothing");
      }
      return "";
    }

    // Why no token fits: the weights alone, or what they leave is less than one token's keys and values.
    function nothingFits(weights, memory, perToken) {
      if (weights > 0 && weights >= memory * GIB) {
        return "none: the weights alone take " + binary(weights) + " of the " + exact(memory) + " GiB";
      }
      return "none: the weights leave " + binary(memory * GIB - weights) + ", less than one token's "
        + binary(perToken);
    }

    function update() {
      var layers = number("layers"), kvHeads = number("kv_heads"), headDim = number("head_dim");
      var params = number("parameters"), batch = number("batch"), context = number("context");
      var memory = number("memory"), bits = data.formats[field("format").value];
      var wrong = refusal();
      if (wrong) {
        ["per_token", "total", "fit"].forEach(function (k) { show(k, "", wrong); });
        return;
      }
      var perToken = bytesPerToken(layers, kvHeads, headDim, bits);
      var total = wholeCacheBytes(perToken, batch, context);
      var weights = params * data.weight_bits / 8;
      var fit = tokensThatFit(memory * GIB, weights, perToken);
      show("per_token", perToken, exact(perToken) + " bytes (" + binary(perToken) + ")");
      show("total", total, binary(total) + " for " + exact(batch) + " × " + exact(context) + " tokens");
      var verdict = fit === 0 ? nothingFits(weights, memory, perToken)
        : exact(fit) + " tokens in total, " + exact(Math.floor(fit / batch)) + " per sequence at batch " + exact(batch)
          + (fit >= batch * context ? ": this context fits" : ": this context does not fit");
      show("fit", fit, verdict);
    }

    field("model").addEventListener("change", pick);
    ["layers", "kv_heads", "head_dim", "parameters"].forEach(function (k) {
      field(k).addEventListener("input", function () { field("model").value = ""; update(); });
    });
    ["format", "batch", "context", "memory"].forEach(function (k) {
      field(k).addEventListener("input", update);
      field(k).addEventListener("change", update);
    });
    pick();
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-calculator]"), setup);
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
