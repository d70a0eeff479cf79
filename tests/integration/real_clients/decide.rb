# Asks Ruby's URI which proxy it would use for each URL given as an argument: URI(url).find_proxy(ENV), as
# Net::HTTP does (Net::HTTP#proxy_uri). find_proxy resolves the host name (IPSocket.getaddress), so the
# harness runs this inside its own network namespace. Prints one JSON object:
# {"version": ..., "decisions": {url: {"decision": "proxy"|"bypass"|"error", "detail": ...}}}.
require "json"
require "uri"

decisions = {}
ARGV.each do |raw|
  begin
    proxy = URI(raw).find_proxy(ENV)
    decisions[raw] = proxy.nil? ? { decision: "bypass", detail: "" } : { decision: "proxy", detail: proxy.to_s }
  rescue StandardError => e
    decisions[raw] = { decision: "error", detail: "#{e.class}: #{e.message}" }
  end
end
puts JSON.generate({ version: "ruby #{RUBY_VERSION}p#{RUBY_PATCHLEVEL} uri #{URI::VERSION}", decisions: decisions })
