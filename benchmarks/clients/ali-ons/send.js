'use strict';
// One ali-ons producer sending to TOPIC every 20 ms, for benchmarks/ons_failover.py.
// Usage: node send.js NAMESRV TOPIC [POLL_MS [SEND_TIMEOUT_MS]]: pollNameServerInteval and sendMsgTimeout, each
// omitted or empty for the client's default (30000 and 3000 ms).
// Prints READY once started, then per send: "<start ms> <end ms> <SendStatus>" or "<start ms> <end ms> ERR <message>".
const { Producer, Message } = require('ali-ons');

const [nameSrv, topic, pollMs, sendTimeoutMs] = process.argv.slice(2);
const options = {
  nameSrv,
  producerGroup: 'ONS_FAILOVER_BENCH',
  accessKeyId: 'k',
  accessKeySecret: 's',
  // nameSrv is given, so the client never fetches an address list over HTTP.
  httpclient: { request: async () => { throw new Error('nameSrv is set'); } },
  logger: { info() {}, warn() {}, error() {}, debug() {} },
};
if (pollMs) options.pollNameServerInteval = Number(pollMs);
if (sendTimeoutMs) options.sendMsgTimeout = Number(sendTimeoutMs);
const producer = new Producer(options);
producer.on('error', () => {});
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

(async () => {
  await producer.ready();
  console.log('READY');
  for (;;) {
    const started = Date.now();
    try {
      const result = await producer.send(new Message(topic, 'TagA', 'x'));
      console.log(`${started} ${Date.now()} ${result.sendStatus}`);
    } catch (err) {
      console.log(`${started} ${Date.now()} ERR ${String(err.message).slice(0, 120).replace(/\n/g, ' ')}`);
    }
    await sleep(20);
  }
})();
