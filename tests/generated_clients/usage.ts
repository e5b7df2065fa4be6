// What an integration writes with the types openapi-typescript generates from /openapi.json
// (as schema.d.ts beside this file): the suite checks it with `tsc --noEmit --strict`. The
// lines marked to expect an error are mistakes the types must refuse: tsc fails if one passes.
import type { components, operations, paths, webhooks } from "./schema";

type Schemas = components["schemas"];

// A deal creation's body, taken from the path and method an integration calls.
type DealCreateBody = paths["/deals/v1/deals"]["post"]["requestBody"]["content"]["application/json"];
export const roadBike: DealCreateBody = {
  name: "Road bike",
  price: 4500,
  packageType: "Medium",
  seller: { email: "kari@example.com", postcode: "0150" },
};
// @ts-expect-error: not one of the package types
export const hugeParcel: DealCreateBody = { packageType: "Huge" };
// @ts-expect-error: the price is a number of currency units, not a string
export const pricedAsText: DealCreateBody = { price: "4500" };
// @ts-expect-error: a seller's fields are named as the interface names them
export const misnamedSeller: DealCreateBody = { seller: { mail: "kari@example.com" } };

// The deal the service answers with, and its status: a closed union, so a switch over it can
// be exhaustive.
type Deal = operations["create_deal"]["responses"][201]["content"]["application/json"];
type DealStatus = Deal["status"];

export function waitsForTheSeller(status: DealStatus): boolean {
  switch (status) {
    case "Draft":
    case "Pickup_Pending":
    case "Shipping_Pending":
      return true;
    case "Ad":
    case "Signed":
    case "Cancelled":
    case "Pickup_Expired":
    case "Pickup_Denied":
    case "Shipping_Expired":
    case "Shipping_In_Progress":
    case "Shipping_Arrived":
    case "Shipping_Returned":
    case "Shipping_Review_Denied":
    case "Refunded":
    case "Completed":
      return false;
    default: {
      const unknown: never = status;
      return unknown;
    }
  }
}
export function summary(deal: Deal): string {
  const seller = deal.seller?.email ?? "no seller yet";
  const next = deal.allowedActions.changeStatus.join(", ");
  return `${deal.name ?? deal.id}: ${deal.status} (${seller}); next: ${next}`;
}
// @ts-expect-error: "Sold" is not a deal status
export const sold: DealStatus = "Sold";

// Every error is the one Problem (RFC 9457), as problem+json.
type Problem = operations["get_deal"]["responses"][404]["content"]["application/problem+json"];
export const notFound: Problem = {
  type: "https://dealbroker.dev/problems/not-found",
  title: "Not Found",
  status: 404,
  detail: "No deal with this id.",
};
export function explain(problem: Schemas["Problem"]): string {
  const fields = (problem.errors ?? []).map((e) => `${e.field}: ${e.message}`);
  return [`${problem.status} ${problem.title}: ${problem.detail}`, ...fields].join("\n");
}
// @ts-expect-error: a Problem always carries its detail
export const withoutDetail: Problem = { type: "about:blank", title: "Conflict", status: 409 };

// The events the service sends to a webhook endpoint, one body type per kind; the kind names
// its data.
type WebhookEvent = {
  [Kind in keyof webhooks]: webhooks[Kind]["post"]["requestBody"]["content"]["application/json"];
}[keyof webhooks];

export function describe(event: WebhookEvent): string {
  switch (event.event) {
    case "deal.status": {
      const waiting = waitsForTheSeller(event.data.status) ? ", waiting for the seller" : "";
      return `deal ${event.data.dealId} is now ${event.data.status}${waiting}`;
    }
    case "payment.status":
      return `payment of deal ${event.data.dealId} is ${event.data.status}`;
    case "signature.status":
    case "deal.offer":
    case "deal.offerApproved":
    case "deal.offerDenied":
      return `${event.event} for deal ${event.data.dealId}`;
    case "deal.shipment":
      return `${event.data.carrier}: the parcel of deal ${event.data.dealId} is ${event.data.type}`;
    case "deal.message": {
      const warned = event.data.warnings.length ? ` (warned: ${event.data.warnings.join(", ")})` : "";
      return `the ${event.data.from} wrote in deal ${event.data.dealId}${warned}`;
    }
    case "webhook.test":
      return `a test of endpoint ${event.data.endpointId}: ${event.data.message}`;
    default: {
      const unknown: never = event;
      return unknown;
    }
  }
}
type DealStatusEvent = webhooks["deal.status"]["post"]["requestBody"]["content"]["application/json"];
export const published: DealStatusEvent = {
  id: "9b2f6c1e-3d4a-4f5b-8c6d-7e8f9a0b1c2d",
  api_version: "v1",
  created: 1795000000000,
  deal_sequence: 2,
  event: "deal.status",
  data: { dealId: "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10", status: "Ad", statusDate: 1795000000000 },
};
export const mixedUp: DealStatusEvent = {
  ...published,
  // @ts-expect-error: "Paid" is a payment status, not a deal status
  data: { ...published.data, status: "Paid" },
};
type Signed = webhooks["payment.status"]["post"]["parameters"]["header"]["webhook-signature"];
export const signature: Signed = "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=";
